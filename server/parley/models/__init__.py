"""The only package that imports torch, transformers or pyannote."""
