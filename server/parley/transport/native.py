"""Parley's own wire, /v1/stream (protocol.md sections 1 to 8)."""

from __future__ import annotations

from typing import Mapping

from websockets.datastructures import Headers
from websockets.http11 import Response

from parley.protocol.messages import (STREAM_PATH, ControlType, Error, ServerMessage,
                                      SessionStarted, StreamConfig, encode, parse_control)
from parley.runtime.session import Mark, Session
from parley.transport.dialect import KeyOffered, Opened, Setup, Stream


def bearer_or_token(headers: Headers) -> str | None:
    """The credentials of ``Authorization: Bearer KEY`` or ``Authorization: Token KEY``."""
    scheme, _, credentials = headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() in ("bearer", "token") else None


class NativeDialect(KeyOffered):
    path = STREAM_PATH
    refuses_at_handshake = False  # browsers cannot read HTTP refusals: see protocol.md §1

    @staticmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        offered = params.get("token")
        return offered if offered is not None else bearer_or_token(headers)

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup:
        return Setup(StreamConfig.from_query(params), webhook_url=params.get("webhook_url"))

    def subprotocol(self, offered: list[str]) -> str | None:
        return None

    def refusal(self, error: Error) -> Response:
        raise NotImplementedError(f"{self.path} refuses after the handshake")

    def error(self, error: Error) -> str:
        return encode(error)

    def translator(self, opened: Opened) -> "NativeTranslator":
        return NativeTranslator(opened)


class NativeTranslator:
    def __init__(self, opened: Opened):
        self._opened = opened

    def opening(self) -> list[str]:
        opened = self._opened
        return [encode(SessionStarted(opened.session_id, opened.setup.config, opened.limits,
                                      opened.model, opened.server))]

    async def receive(self, message: str | bytes, session: Stream) -> bool:
        assert isinstance(session, Session)  # this dialect's setup asks for one session
        if isinstance(message, bytes):
            await session.feed(message)
            return False
        kind = parse_control(message)
        if kind is ControlType.FINALIZE:
            await session.finalize()
        return kind is ControlType.END_OF_STREAM

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        return [] if isinstance(message, Mark) else [encode(message)]
