"""The wire contract of protocol.md, as plain data: no I/O, no asyncio, no torch."""
