"""Pure streaming logic over numbers and dataclasses: no asyncio, no torch, no sockets."""
