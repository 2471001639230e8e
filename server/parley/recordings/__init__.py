"""Recordings: a file decoded to audio, cut into windows on the ASR thread's background
rows, its speakers found over the whole file, and the finals it gives."""
