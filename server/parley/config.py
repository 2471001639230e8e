"""Typed settings, built once and validated: defaults ← environment (PARLEY_*) ← flags.

Nested fields read from variables such as ``PARLEY_VAD__MIN_SILENCE_MS=700``. API
keys come from ``PARLEY_API_KEYS`` (a JSON object of name → key), from a file of
``name:key`` lines (``--api-keys-file``), or as the single key ``PARLEY_TOKEN`` (named
``token``): never from a flag, because argv is visible to every user of the machine.
No key value is ever logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from parley.core.recording_speakers import RecordingClustering
from parley.core.speakers import ClusteringConfig
from parley.core.stream_diarizer import DiarizationConfig
from parley.core.turns import TurnConfig
from parley.core.vad import VadConfig
from parley.runtime.files import FileLimits
from parley.transport.auth import is_loopback

_DIARIZATION, _CLUSTERING, _TURNS = DiarizationConfig(), ClusteringConfig(), TurnConfig()
_FILES, _RECORDING = FileLimits(), RecordingClustering()


def default_models_dir() -> Path:
    """$PARLEY_MODELS_DIR (as Settings reads it), else ~/.cache/parley/models; also for
    `parley models`, which reads no other setting."""
    return Path(os.environ.get("PARLEY_MODELS_DIR") or Path.home() / ".cache" / "parley" / "models")


def default_static_dir() -> Path | None:
    """client_js/ of the source tree the package runs from (an editable install)."""
    candidate = Path(__file__).resolve().parents[2] / "client_js"
    return candidate if candidate.is_dir() else None


_VAD = VadConfig()  # the VAD's own defaults are the settings' defaults


class VadSettings(BaseModel):
    """Turn detection: the voice activity detector and how segments open and close."""

    aggressiveness: int = Field(
        _VAD.aggressiveness, ge=0, le=3, description="webrtcvad mode: 3 rejects the most noise"
    )
    frame_ms: Literal[10, 20, 30] = _VAD.frame_ms  # type: ignore[assignment]  # VadConfig checks it
    speech_pad_ms: int = Field(_VAD.speech_pad_ms, ge=0, le=2000)
    min_speech_ms: int = Field(_VAD.min_speech_ms, ge=10, le=2000)
    min_silence_ms: int = Field(_VAD.min_silence_ms, ge=10, le=5000)
    max_segment_s: float = Field(_VAD.max_segment_s, ge=3.0, le=29.0)

    def to_config(self) -> VadConfig:
        return VadConfig(**self.model_dump())

    @model_validator(mode="after")
    def _consistent(self) -> VadSettings:
        self.to_config()  # VadConfig holds the cross-field rules; a ValueError surfaces here
        return self


class AsrSettings(BaseModel):
    """The speech model, its device, and how the scheduler paces and batches its decodes."""

    model: str = Field("tiny.en", description="bundle name, local directory or hub id")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(None, ge=1, le=256, description="torch CPU threads")
    partial_interval_s: float = Field(
        1.0,
        ge=0.2,
        le=10.0,
        description="seconds between a stream's partials when "
        "the worker has time (longer under load)",
    )
    queue_size: int = Field(32, ge=2, le=4096, description="decodes queued or running at once")
    assistant: str | None = Field(None, description="draft model: bundle name, path or hub id")
    assistant_languages: list[str] | None = Field(
        None, description="languages the assistant drafts for (None: all)"
    )
    hypothesis_drafts: bool = Field(True, description="draft from the segment's last partial")
    max_draft: int = Field(15, ge=1, le=63, description="most draft tokens verified at once")
    cuda_graphs: bool = Field(True, description="replay decoder passes as CUDA graphs")
    max_batch: int = Field(
        16,
        ge=1,
        le=64,
        description="decodes advanced together, one decoder row each (memory is per row)",
    )
    target_busy: float = Field(
        0.8,
        gt=0.1,
        le=1.0,
        description="busy fraction up to which partials may fill the "
        "time finals leave; partials stretch beyond it",
    )
    context_tokens: int = Field(
        0, ge=0, le=223, description="tokens of earlier finals given as the prompt"
    )


class DiarizationSettings(BaseModel):
    """Speaker labels: the speaker models, the rolling window, and the linking thresholds."""

    source: str = Field(
        "off",
        description="off, bundle, a pyannote pipeline directory, or a "
        "hub id such as pyannote/speaker-diarization-3.1",
    )
    window_s: float = Field(
        _DIARIZATION.window_s, ge=1.0, le=10.0, description="audio each step looks at"
    )
    step_s: float = Field(_DIARIZATION.step_s, ge=0.1, le=5.0, description="how often a step runs")
    latency_s: float = Field(
        _DIARIZATION.latency_s, ge=0.1, le=30.0, description="how long a label may change"
    )
    change_latency_s: float = Field(
        _TURNS.change_latency_s,
        ge=0.0,
        le=30.0,
        description="how old a speaker change must be before a final is cut there",
    )
    max_speakers: int = Field(_CLUSTERING.max_speakers, ge=1, le=64)
    new_speaker_distance: float = Field(
        _CLUSTERING.new_speaker_distance,
        gt=0.0,
        lt=2.0,
        description="cosine distance that makes a new speaker",
    )
    merge_distance: float = Field(
        _CLUSTERING.merge_distance,
        ge=0.0,
        lt=2.0,
        description="speakers whose centroids come this close merge",
    )
    split_similarity: float = Field(
        _CLUSTERING.split_similarity,
        ge=0.0,
        le=2.0,
        description="a speaker whose samples fall in two groups "
        "less alike than this, relative to their own "
        "spread, is split in two (0: never)",
    )
    min_speaker_s: float = Field(
        _CLUSTERING.min_speaker_s,
        ge=0.0,
        le=60.0,
        description="seconds heard alone before a speaker is shown",
    )
    min_turn_s: float = Field(
        _TURNS.min_turn_s,
        ge=0.0,
        le=10.0,
        description="shorter runs of words never make a turn of their "
        "own unless pauses set them apart",
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="torch CPU threads of the diarization "
        "thread (its small operations run "
        "fastest on one)",
    )

    def to_config(self) -> DiarizationConfig:
        """The diarizer's config (ValueError if the values contradict each other)."""
        return DiarizationConfig(
            window_s=self.window_s,
            step_s=self.step_s,
            latency_s=self.latency_s,
            clustering=ClusteringConfig(
                max_speakers=self.max_speakers,
                new_speaker_distance=self.new_speaker_distance,
                merge_distance=self.merge_distance,
                split_similarity=self.split_similarity,
                min_speaker_s=self.min_speaker_s,
            ),
            turns=TurnConfig(min_turn_s=self.min_turn_s, change_latency_s=self.change_latency_s),
        )

    @property
    def enabled(self) -> bool:
        return self.source != "off"

    @model_validator(mode="after")
    def _consistent(self) -> DiarizationSettings:
        self.to_config()  # DiarizationConfig holds the cross-field rules
        return self


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
        0.6,
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
        None, description='browser origins that may stream (None: the server\'s own; ["*"]: any)'
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
    speaker_distance: float = Field(
        _RECORDING.distance,
        gt=0,
        lt=2,
        description="cosine "
        "distance (average linkage) above which two voices of a "
        "recording are two speakers",
    )

    def to_limits(self) -> FileLimits:
        return FileLimits(
            max_jobs=self.max_jobs,
            max_bytes=int(self.max_upload_mb * 2**20),
            max_seconds=self.max_duration_s,
            windows_in_flight=self.windows_in_flight,
            diarization_step_s=self.diarization_step_s,
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
        256, ge=1, le=100000, description="events a session may have waiting; more are dropped"
    )
    max_attempts: int = Field(6, ge=1, le=100)

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


class Settings(BaseSettings):
    """Every setting of a server: defaults, then ``PARLEY_*`` variables, then flags."""

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_", env_nested_delimiter="__", extra="forbid"
    )

    models_dir: Path = Field(default_factory=default_models_dir)
    token: SecretStr | None = None
    api_keys: dict[str, SecretStr] = Field(default_factory=dict)
    api_keys_file: Path | None = None
    allow_anonymous: bool = Field(
        False, description="serve a non-loopback address without API keys"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    server: ServerSettings = ServerSettings()
    asr: AsrSettings = AsrSettings()
    vad: VadSettings = VadSettings()
    diarization: DiarizationSettings = DiarizationSettings()
    files: FilesSettings = FilesSettings()
    webhooks: WebhookSettings = WebhookSettings()
    twilio: TwilioSettings = TwilioSettings()
    cluster: ClusterSettings = ClusterSettings()

    @property
    def has_keys(self) -> bool:
        return bool(self.token or self.api_keys or self.api_keys_file)

    @model_validator(mode="after")
    def _not_open_to_everyone(self) -> Settings:
        for host in (self.server.host, self.cluster.host):  # parley serve's; parley cluster's
            if not is_loopback(host) and not self.has_keys and not self.allow_anonymous:
                raise ValueError(
                    f"refusing to serve {host} without API keys: set PARLEY_API_KEYS "
                    "or --api-keys-file, or pass --allow-anonymous to let anyone stream"
                )
        return self

    @model_validator(mode="after")
    def _partials_fit_segments(self) -> Settings:
        if self.asr.partial_interval_s >= self.vad.max_segment_s:
            raise ValueError("asr.partial_interval_s must be shorter than vad.max_segment_s")
        return self
