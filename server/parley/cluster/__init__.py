"""Parley on Ray Serve: the same pipeline on many replicas, over many machines."""
