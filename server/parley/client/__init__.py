"""Python client and CLI client (imports only parley.protocol: no torch needed)."""
