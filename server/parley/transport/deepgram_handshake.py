"""What Deepgram's two live wires (/v1/listen and Flux's /v2/listen) share: where a
client offers its key at the handshake, how a refusal is answered, and how a control
message says what it is."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from http import HTTPStatus

from websockets.datastructures import Headers
from websockets.http11 import Response

from parley.protocol.messages import Error, ErrorCode
from parley.transport.dialect import KeyOffered
from parley.transport.http import json_response
from parley.transport.native import bearer_or_token

_HTTP_STATUS = {
    ErrorCode.UNAUTHORIZED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.FORBIDDEN_ORIGIN: HTTPStatus.FORBIDDEN,
    ErrorCode.BAD_CONFIG: HTTPStatus.BAD_REQUEST,
    ErrorCode.TOO_MANY_SESSIONS: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.SERVER_BUSY: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.SHUTTING_DOWN: HTTPStatus.SERVICE_UNAVAILABLE,
}


class DeepgramHandshake(KeyOffered):
    """Keys as Deepgram's SDKs offer them, and refusals as HTTP errors they expect."""

    resumable = False

    @staticmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        # Browsers cannot set headers: Deepgram's browser SDK offers the subprotocols
        # ``token, KEY`` instead.
        offered = [p.strip() for p in headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if len(offered) >= 2 and offered[0].lower() in ("token", "bearer"):
            return offered[1]
        return bearer_or_token(headers)

    def subprotocol(self, offered: list[str]) -> str | None:
        return offered[0] if offered and offered[0].lower() in ("token", "bearer") else None

    def refusal(self, error: Error) -> Response:
        """Refused at the handshake: Deepgram's SDKs expect an HTTP 401 for a bad key."""
        status = _HTTP_STATUS.get(error.code, HTTPStatus.BAD_REQUEST)
        response = json_response(
            status,
            {
                "err_code": error.code.value.upper(),
                "err_msg": error.message,
                "request_id": str(uuid.uuid4()),
            },
        )
        response.headers["dg-error"] = error.message
        return response


def control_type(message: str) -> str | None:
    """A text message's ``type``, as both wires name their control messages; None for
    anything that is no JSON object with one."""
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return None
    return data.get("type") if isinstance(data, dict) else None
