"""Who may stream: the checks every endpoint path makes before a session starts, in
the order protocol.md gives their errors (origin, key, drain, capacity, per-key limit,
settings), and the open sessions counted per key."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from websockets.http11 import Request

from parley.core.asr import Decoding
from parley.protocol.messages import Error, ErrorCode, ProtocolError
from parley.runtime.capacity import LiveCapacity, LiveLoad
from parley.transport.auth import ANONYMOUS, ApiKeys, OriginPolicy
from parley.transport.dialect import Dialect, Setup, query_of


@dataclass(frozen=True)
class StreamLimits:
    """The limits every streaming session is held to (told in ``session_started``); their
    defaults are the server settings' (serving_config.ServerSettings)."""

    max_sessions: int
    max_frame_bytes: int
    idle_timeout_s: float
    max_segment_s: float
    max_session_s: float
    max_participants: int  # per /v1/meeting connection
    resume_window_s: float  # a resumable session waits this long for its client
    max_sessions_per_key: int | None = None
    diarization_latency_s: float | None = None

    def to_json(self) -> dict:
        """The limits as ``session_started`` reports them."""
        limits = {
            "max_frame_bytes": self.max_frame_bytes,
            "idle_timeout_s": self.idle_timeout_s,
            "max_segment_s": self.max_segment_s,
            "max_session_s": self.max_session_s,
            "max_participants": self.max_participants,
            "resume_window_s": self.resume_window_s,
        }
        if self.diarization_latency_s is not None:
            limits["diarization_latency_s"] = self.diarization_latency_s
        return limits


@dataclass
class Access:
    """Who may stream: keys (none: anyone) and the browser origins allowed. The keys are
    replaced while serving when the key file changes (``KeyWatch``): read them at each
    request, never keep a copy."""

    keys: ApiKeys = ApiKeys()
    origins: OriginPolicy = OriginPolicy()
    key_file: Path | None = None  # where some of the keys were read from
    read_keys: Callable[[], ApiKeys] | None = None  # all of them again, the key file's anew


class Refused(Exception):
    """A connection that may not stream (or a session that must end): its error."""

    def __init__(self, error: Error):
        super().__init__(error.message)
        self.error = error


class Admission:
    """Admits or refuses; counts each key's open sessions (``opened``/``closed``)."""

    def __init__(
        self,
        access: Access,
        limits: StreamLimits,
        check_decoding: Callable[[Decoding], None],
        diarization: bool,
        allows_webhook: Callable[[str], bool],
        capacity: LiveCapacity | None = None,
    ):
        self._capacity = capacity
        self._access = access
        self._limits = limits
        self._check_decoding = check_decoding
        self._diarization = diarization
        self._allows_webhook = allows_webhook
        self._per_key: Counter[str] = Counter()

    def opened(self, key: str) -> None:
        """A session admitted by ``key`` started."""
        self._per_key[key] += 1

    def closed(self, key: str) -> None:
        """A session admitted by ``key`` ended."""
        self._per_key[key] -= 1

    def identify(
        self,
        request: Request,
        dialect: Dialect,
        params: Mapping[str, str],
        resuming: bool = False,
    ) -> str:
        """The name of the key an allowed origin came with (for a resume, an access
        token of it past its expiry too), or Refused."""
        headers = request.headers
        if not self._access.origins.allows(headers.get("Origin"), headers.get("Host")):
            raise Refused(
                Error(
                    ErrorCode.FORBIDDEN_ORIGIN,
                    "pages from this origin may not stream to this server",
                )
            )
        keys = self._access.keys.resuming() if resuming else self._access.keys
        key = dialect.identify(request, params, keys)
        if key is None:
            raise Refused(Error(ErrorCode.UNAUTHORIZED, "a valid API key is required"))
        return key

    def admit(
        self, request: Request, dialect: Dialect, live: LiveLoad, sessions: int, draining: bool
    ) -> tuple[Setup, str]:
        """The stream's settings and the name of the key it came with, or Refused
        (``live``: the streams served now, in ``sessions`` sessions)."""
        params = query_of(request)
        key = self.identify(request, dialect, params)
        if draining:
            raise Refused(Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down"))
        if sessions >= self._limits.max_sessions:
            raise Refused(
                Error(
                    ErrorCode.SERVER_BUSY,
                    f"the server is at its limit of {self._limits.max_sessions} "
                    "sessions; try again later",
                )
            )
        per_key = self._limits.max_sessions_per_key
        if per_key is not None and key != ANONYMOUS and self._per_key[key] >= per_key:
            raise Refused(
                Error(
                    ErrorCode.TOO_MANY_SESSIONS,
                    f"this key has its limit of {per_key} sessions open",
                )
            )
        setup = self._setup(request, dialect, params)
        if self._capacity is not None:
            why = self._capacity.refusal(live, setup.config.diarization)
            if why is not None:
                raise Refused(Error(ErrorCode.SERVER_BUSY, why))
        return setup, key

    def _setup(self, request: Request, dialect: Dialect, params: Mapping[str, str]) -> Setup:
        try:
            setup = dialect.setup(params, request.headers)
            self._check_decoding(setup.config.decoding)
        except ProtocolError as exc:
            raise Refused(Error(exc.code, exc.message)) from None
        except ValueError as exc:
            raise Refused(Error(ErrorCode.BAD_CONFIG, str(exc))) from None
        if setup.webhook_url is not None and not self._allows_webhook(setup.webhook_url):
            raise Refused(
                Error(
                    ErrorCode.BAD_CONFIG,
                    "this server does not send webhooks to that URL (see webhooks.allowed_targets)",
                )
            )
        if setup.config.diarization and not self._diarization:
            raise Refused(
                Error(
                    ErrorCode.BAD_CONFIG,
                    "diarization is not available on this server (start it with "
                    "--diarization bundle)",
                )
            )
        return setup
