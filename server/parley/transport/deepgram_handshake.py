"""What Deepgram's two live wires (/v1/listen and Flux's /v2/listen) share at the
handshake: where a client offers its key, and how a refusal is answered."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from websockets.datastructures import Headers
from websockets.http11 import Response

from parley.protocol.messages import Error
from parley.transport.dialect import KeyOffered
from parley.transport.http import json_response, refusal_status
from parley.transport.native import bearer_or_token


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
        response = json_response(
            refusal_status(error.code),
            {
                "err_code": error.code.value.upper(),
                "err_msg": error.message,
                "request_id": str(uuid.uuid4()),
            },
        )
        # A header holds printable ASCII; the message may quote what the client sent.
        header = "".join(ch if " " <= ch <= "~" else "?" for ch in error.message)
        response.headers["dg-error"] = header
        return response
