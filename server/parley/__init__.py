"""Parley: real-time, speaker-labelled transcription over WebSocket."""

__version__ = "0.1.0"
