"""Python client and CLI client: it imports only parley.protocol and the pure
parley.core (no torch, no server)."""
