"""The serving sections of the settings: the server's socket, limits and admission;
recordings; webhooks; Twilio; Wyoming; the Ray Serve cluster (``parley.config`` composes
them)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from parley.core.capacity import CapacityPolicy
from parley.recordings.files import FileLimits
from parley.runtime.webhook_config import WebhookConfig

_FILES = FileLimits()


def default_static_dir() -> Path | None:
    """client_js/ of the source tree the package runs from (an editable install)."""
    candidate = Path(__file__).resolve().parents[2] / "client_js"
    return candidate if candidate.is_dir() else None


class ServerSettings(BaseModel):
    """The listening socket, limits, admission, resume and drain of ``parley serve``."""

    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    max_sessions: int = Field(16, ge=1, le=10000)
    max_frame_bytes: int = Field(256 * 1024, ge=1024, le=16 * 1024 * 1024)
    idle_timeout_s: float = Field(10.0, gt=0, le=3600)
    max_session_s: float = Field(
        4 * 3600,
        ge=1,
        le=7 * 86400,
        description="a session ends (its audio all transcribed) after this long",
    )
    max_sessions_per_key: int | None = Field(
        None, ge=1, le=10000, description="sessions one API key may hold open"
    )
    admit_by_capacity: bool = Field(
        True,
        description="refuse a new stream (server_busy) "
        "when the workers' measured cost says it would not be "
        "real time; max_sessions stays the ceiling",
    )
    capacity_target_busy: float = Field(
        CapacityPolicy.target_busy,
        gt=0.05,
        le=1.0,
        description="the share of the ASR (and diarization) "
        "thread that live streams' finals (and "
        "speaker steps) may take",
    )
    resume_window_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="how long a /v1/stream session whose "
        "connection dropped waits to be resumed "
        "(0: sessions end with their connection)",
    )
    max_participants: int = Field(
        64,
        ge=1,
        le=1024,
        description="participants one /v1/meeting connection may carry (each is a session's work)",
    )
    drain_timeout_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="on SIGTERM, how long live sessions may take to finish their audio",
    )
    allowed_origins: list[str] | None = Field(
        None,
        description="browser origins that may stream and call the HTTP routes"
        ' (None: the server\'s own; ["*"]: any)',
    )
    ssl_certfile: Path | None = Field(
        None, description="serve TLS (wss://) with this certificate chain"
    )
    ssl_keyfile: Path | None = None
    static_dir: Path | None = Field(
        default_factory=default_static_dir,
        description="the browser client served at / (None: none)",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile needs ssl_certfile")
        return self


class FilesSettings(BaseModel):
    """Recordings sent whole (POST /v1/audio/transcriptions, /v1/listen, /predict)."""

    max_jobs: int = Field(
        _FILES.max_jobs,
        ge=1,
        le=1000,
        description="recordings transcribed at once; one more is answered 429 with Retry-After",
    )
    max_upload_mb: float = Field(
        _FILES.max_bytes / 2**20, gt=0, le=100_000, description="an upload's size"
    )
    max_receiving: int = Field(
        _FILES.max_receiving,
        ge=1,
        le=10_000,
        description="uploads arriving at once; one more is answered 429 before it is read",
    )
    max_duration_s: float = Field(
        _FILES.max_seconds, gt=0, le=7 * 86400, description="a recording's duration"
    )
    windows_in_flight: int = Field(
        _FILES.windows_in_flight,
        ge=1,
        le=256,
        description="a recording's 30 s windows queued or decoding at once",
    )
    diarization_step_s: float = Field(
        _FILES.diarization_step_s,
        ge=0.5,
        le=10.0,
        description="how far apart a recording's diarization windows are",
    )
    piece_gap_s: float = Field(
        _FILES.piece_gap_s,
        ge=0.0,
        le=5.0,
        description="the longest pause kept between two speech segments packed in a window",
    )

    def to_limits(self) -> FileLimits:
        """These settings as the file pipeline's ``FileLimits``."""
        return FileLimits(
            max_jobs=self.max_jobs,
            max_bytes=int(self.max_upload_mb * 2**20),
            max_receiving=self.max_receiving,
            max_seconds=self.max_duration_s,
            windows_in_flight=self.windows_in_flight,
            diarization_step_s=self.diarization_step_s,
            piece_gap_s=self.piece_gap_s,
        )


class WebhookSettings(BaseModel):
    """Result webhooks: where each session's events are POSTed, signed, and how hard to try."""

    url: str | None = Field(
        None, description="POST each session's lifecycle and finals here (Standard Webhooks)"
    )
    secret: SecretStr | None = Field(None, description="the signing secret, whsec_ + base64")
    allowed_targets: list[str] = Field(
        default_factory=list,
        description="URL prefixes a session may name as its own webhook target",
    )
    queue_size: int = Field(
        WebhookConfig.queue_size,
        ge=1,
        le=100000,
        description="events a session may have waiting; more are dropped",
    )
    max_attempts: int = Field(WebhookConfig.max_attempts, ge=1, le=100)

    @property
    def enabled(self) -> bool:
        return self.url is not None or bool(self.allowed_targets)

    @model_validator(mode="after")
    def _signed(self) -> WebhookSettings:
        for url in [self.url or "http://", *self.allowed_targets]:
            if not url.startswith(("http://", "https://")):
                raise ValueError("webhook URLs must be http:// or https:// URLs")
        if self.enabled and (
            self.secret is None or not self.secret.get_secret_value().startswith("whsec_")
        ):
            raise ValueError("webhooks need webhooks.secret, a whsec_ signing secret")
        return self


class TwilioSettings(BaseModel):
    """Twilio Media Streams: the signing token and the URL Twilio connects to."""

    auth_token: SecretStr | None = Field(
        None,
        description="the Twilio account's auth token: "
        "/v1/twilio then admits only "
        "connections Twilio signed",
    )
    public_url: str | None = Field(
        None,
        description="the scheme and host Twilio connects to "
        "(e.g. wss://voice.example.com), when a "
        "proxy in front changes the Host header",
    )

    @model_validator(mode="after")
    def _public_url(self) -> TwilioSettings:
        if self.public_url is not None and not self.public_url.startswith(("wss://", "ws://")):
            raise ValueError("twilio.public_url must start with wss:// or ws://")
        return self


class WyomingSettings(BaseModel):
    """Home Assistant's Wyoming protocol, on a TCP port of its own (protocol.md section
    10c). Wyoming carries no credentials: its clients stream as the key ``key`` names,
    from the addresses ``allowed_networks`` holds."""

    port: int | None = Field(
        None, ge=0, le=65535, description="serve Wyoming on this TCP port (None: not served)"
    )
    host: str | None = Field(None, description="where it listens (None: server.host)")
    key: str | None = Field(
        None,
        description="the API key (by name) its clients stream as; needed on a server with keys",
    )
    allowed_networks: list[str] | None = Field(
        None, description="the client addresses it serves (e.g. 192.168.1.0/24; None: any)"
    )
    zeroconf: str | None = Field(
        None,
        description="advertise the port on the local network (mDNS) under this name, for "
        "Home Assistant to discover (None: not advertised)",
    )

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, networks: list[str] | None) -> list[str] | None:
        for network in networks or ():
            ipaddress.ip_network(network, strict=False)  # ValueError names the bad one
        return networks

    @model_validator(mode="after")
    def _advertised(self) -> WyomingSettings:
        if self.zeroconf is None:
            return self
        if self.port is None:
            raise ValueError("wyoming.zeroconf advertises the Wyoming port: set wyoming.port")
        if not self.zeroconf.strip() or len(self.zeroconf.encode()) > 63 or "." in self.zeroconf:
            raise ValueError(
                "wyoming.zeroconf is a name of 1 to 63 bytes without dots (a DNS label)"
            )
        return self


class ClusterSettings(BaseModel):
    """``parley cluster``: the server as a Ray Serve application (cluster/)."""

    address: str | None = Field(
        None,
        description="Ray cluster to join (e.g. auto, or ray://head:10001); None: start one here",
    )
    host: str = Field("127.0.0.1", description="where Ray Serve's HTTP proxy listens")
    port: int = Field(8000, ge=1, le=65535)
    proxy_location: Literal["EveryNode", "HeadOnly"] = "EveryNode"
    replicas: int = Field(
        2, ge=1, le=1000, description="replicas at the start (and the fewest, when autoscaling)"
    )
    max_replicas: int | None = Field(
        None, ge=1, le=1000, description="autoscale up to this many replicas"
    )
    target_sessions: float | None = Field(
        None,
        gt=0,
        description="sessions per replica the autoscaler aims at (default: 3/4 of the cap)",
    )
    upscale_delay_s: float = Field(10.0, ge=0)
    downscale_delay_s: float = Field(
        300.0, ge=0, description="downscaling drains sessions, so it waits longer"
    )
    look_back_s: float = Field(
        30.0, gt=0, description="the autoscaler's window over ongoing sessions"
    )
    max_queued_sessions: int = Field(
        16,
        ge=0,
        description="sessions waiting at the proxy "
        "for a free replica; beyond them Ray refuses the "
        "handshake (HTTP 500 for WebSockets in Ray 2.60)",
    )
    num_cpus: float = Field(1.0, ge=0, description="CPUs each replica reserves")
    num_gpus: float = Field(0.0, ge=0, description="GPUs each replica reserves (1: its own)")

    @model_validator(mode="after")
    def _replica_range(self) -> ClusterSettings:
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError("cluster.max_replicas must be at least cluster.replicas")
        return self
