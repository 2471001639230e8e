"""A request's body as one JSON object, read within bounds: a size and a time for it to
arrive whole, so that a client cannot make the server buffer or wait on any body it
sends (token requests, AssemblyAI's transcript requests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from parley.transport.upload_errors import UploadCode, UploadError


async def json_object(
    request: Request, max_bytes: int, timeout_s: float, what: str
) -> Mapping[str, Any]:
    """The request's JSON object, or {} for an empty body; UploadError otherwise, and
    for a body over ``max_bytes`` or not in whole within ``timeout_s`` (``what``: the
    request, as the refusal names it)."""
    raw = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                raw += chunk
                if len(raw) > max_bytes:
                    raise UploadError(UploadCode.TOO_LARGE, f"{what} is at most {max_bytes} bytes")
    except TimeoutError:
        raise UploadError(UploadCode.IDLE_TIMEOUT, "the request's body came too slowly") from None
    if not raw.strip():
        return {}
    try:
        asked = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise UploadError(UploadCode.BAD_REQUEST, "the body must be a JSON object") from None
    if not isinstance(asked, dict):
        raise UploadError(UploadCode.BAD_REQUEST, "the body must be a JSON object")
    return asked


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")
