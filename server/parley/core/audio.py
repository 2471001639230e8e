"""The one sample rate everything inside the server works at (clients' audio is resampled
to it on arrival, and Whisper, the VAD and the speaker models all read it)."""

SAMPLE_RATE = 16000
