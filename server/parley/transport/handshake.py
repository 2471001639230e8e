"""Refusing at the handshake, for the dialects whose vendors do (``RefusesAtHandshake``):
the admission checks run when the upgrade is asked for, and a refusal is the dialect's
HTTP answer. The handler admits again after the upgrade: the server may fill up in
between."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from websockets.http11 import Request, Response

from parley.protocol.messages import ErrorCode
from parley.runtime.metrics import Metrics
from parley.transport.admission import Refused
from parley.transport.dialect import Dialect, RefusesAtHandshake

log = logging.getLogger(__name__)
# Told to HTTP clients refused as busy: about the span over which the load is measured.
BUSY_RETRY_AFTER_S = 10


class HandshakeCheck:
    """A request's HTTP refusal, or None to let the handshake go on."""

    def __init__(
        self,
        dialect_of: Callable[[Request], Dialect[Any]],
        admit: Callable[[Request, Dialect[Any]], object],
        metrics: Metrics,
    ):
        self._dialect_of = dialect_of
        self._admit = admit
        self._metrics = metrics

    def __call__(self, request: Request) -> Response | None:
        dialect = self._dialect_of(request)
        if not isinstance(dialect, RefusesAtHandshake):
            return None
        try:
            self._admit(request, dialect)
        except Refused as refusal:
            code = refusal.error.code
            self._metrics.sessions.labels(code.value).inc()
            log.info(
                "refused a session at the handshake: %s", code.value, extra={"outcome": code.value}
            )
            response = dialect.refusal(refusal.error)
            if code in (ErrorCode.SERVER_BUSY, ErrorCode.SHUTTING_DOWN):
                response.headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
            return response
        return None
