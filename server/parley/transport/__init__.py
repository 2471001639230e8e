"""WebSocket and HTTP adapters around runtime sessions (never imports parley.models)."""
