"""Typed settings, built once and validated: defaults ← environment (PARLEY_*) ← flags.

Nested fields read from variables such as ``PARLEY_VAD__MIN_SILENCE_MS=700``. API keys
come from ``PARLEY_API_KEYS`` (a JSON object of name → key), from a file of ``name:key``
lines (``--api-keys-file``), or as the single key ``PARLEY_TOKEN`` (named ``token``):
never from a flag, because argv is visible to every user of the machine. No key value
is ever logged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from parley.core.asr import MAX_DRAFT, MAX_ROWS, ComputeType
from parley.core.audio import MAX_SEGMENT_S
from parley.core.policy import (
    BURST_FINALS,
    IDLE,
    LOWEST_NICE,
    PARTIAL_INTERVAL_S,
    SHORT_FINALS_BUSY,
    Idle,
    PartialPacing,
)
from parley.core.speakers import ClusteringConfig
from parley.core.stream_diarizer import DiarizationConfig
from parley.core.turns import TurnConfig
from parley.core.vad import VadConfig
from parley.serving_config import (
    ClusterSettings,
    FilesSettings,
    ServerSettings,
    TwilioSettings,
    WebhookSettings,
    WyomingSettings,
)
from parley.transport.auth import is_loopback

_DIARIZATION, _CLUSTERING, _TURNS = DiarizationConfig(), ClusteringConfig(), TurnConfig()


def default_models_dir() -> Path:
    """$PARLEY_MODELS_DIR (as Settings reads it), else ~/.cache/parley/models; also for
    `parley models`, which reads no other setting."""
    return Path(os.environ.get("PARLEY_MODELS_DIR") or Path.home() / ".cache" / "parley" / "models")


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
    max_segment_s: float = Field(_VAD.max_segment_s, ge=3.0, le=MAX_SEGMENT_S)

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
    compute_type: ComputeType = Field(
        "auto",
        description="auto: fp16 on CUDA; on a CPU bfloat16 where it has AMX or AVX-512 "
        "BF16, else float32; int8: the encoder and output head in int8 (CPU only: "
        "faster, a word here and there differs); bfloat16: the encoder in bfloat16 (CPU "
        "only; pays on CPUs with AMX or AVX-512 BF16)",
    )
    threads: int | None = Field(None, ge=1, le=256, description="torch CPU threads")
    partial_interval_s: float = Field(
        PARTIAL_INTERVAL_S,
        ge=0.2,
        le=10.0,
        description="seconds between partials while the worker has time (longer under load)",
    )
    queue_size: int = Field(32, ge=2, le=4096, description="decodes queued or running at once")
    assistant: str | None = Field(None, description="draft model: bundle name, path or hub id")
    assistant_languages: list[str] | None = Field(
        None, description="languages the assistant drafts for (None: all)"
    )
    hypothesis_drafts: bool = Field(True, description="draft from the segment's last partial")
    max_draft: int = Field(MAX_DRAFT, ge=1, le=63, description="most draft tokens verified at once")
    cuda_graphs: bool = Field(True, description="replay decoder passes as CUDA graphs")
    window_margin_s: float = Field(
        3.0,
        ge=0.5,
        le=30.0,
        description="encode a partial's audio and this much padding, not a whole 30 s "
        "window (a decode that runs on past its audio is decoded again over the whole "
        "window); 30: always the whole window. Not with CUDA graphs",
    )
    short_final_windows: bool = Field(
        False,
        description="finals and recordings' windows over such short windows too: about "
        "twice the streams on a CPU, but words move, some clips read worse (bench/README)",
    )
    short_finals_busy: float = Field(
        SHORT_FINALS_BUSY,
        ge=0.0,
        le=1.0,
        description="real-time clients' live finals take short windows too once finals "
        "alone have kept the ASR thread this busy over the last 10 s, or while other "
        "finals wait for their encoder passes with them (1: never)",
    )
    burst_finals: int = Field(
        BURST_FINALS,
        ge=0,
        le=4096,
        description="with speaker labels on a CPU, finals decoding or waiting from which "
        "the ASR thread computes on every core, not only those the speaker threads leave "
        "it, while no speaker step a final waits for is queued (0: never)",
    )
    max_batch: int = Field(
        MAX_ROWS,
        ge=1,
        le=64,
        description="decodes advanced together, one decoder row each (memory is per row)",
    )
    target_busy: float = Field(
        PartialPacing.target_busy,
        gt=0.1,
        le=1.0,
        description="busy fraction up to which partials may fill what finals leave",
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
    closing_s: float = Field(
        _DIARIZATION.closing_s,
        ge=0.0,
        le=86400.0,
        description="a stream up to this long has its speakers clustered at once at its "
        "end, as a recording's, and its finals relabelled (0: never)",
    )
    relabel_every_s: float = Field(
        _DIARIZATION.relabel_every_s,
        ge=0.0,
        le=3600.0,
        description="before its end, a stream's speakers so far are clustered at once this "
        "often (or a quarter of the stream, if longer; only in its first 30 minutes) and "
        "its settled finals relabelled (0: only at the end)",
    )
    change_latency_s: float = Field(
        _TURNS.change_latency_s,
        ge=0.0,
        le=30.0,
        description="how old a speaker change must be before a final is cut there (at "
        "most latency_s; it cuts only within max_cut_age_s)",
    )
    confirm_latency_s: float = Field(
        _TURNS.confirm_latency_s or 0.0,
        ge=0.0,
        le=30.0,
        description="a younger speaker change, at least this old, cuts a final when two "
        "diarization steps in a row read it at the same place (0: never)",
    )
    max_cut_age_s: float = Field(
        _TURNS.max_cut_age_s or 0.0,
        ge=0.0,
        le=30.0,
        description="a speaker change first found more than this long after it is not "
        "cut: the final runs on to a pause or a later change, its words still parted at "
        "the change as a cut would part them, and a voice the decode dropped decoded "
        "again alone (0: every change cuts, however late)",
    )
    busy_reembed_s: float = Field(
        _DIARIZATION.busy_reembed_s,
        ge=0.0,
        le=10.0,
        description="after a skipped step, a speaker continuing from the window before is "
        "embedded again only once heard alone this long since its last embedding (0: always)",
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
        description="a speaker whose samples fall in two groups less alike than this, "
        "relative to their own spread, is split in two (0: never)",
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
        description="shorter runs of words make no turn of their own unless pauses set them apart",
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="torch threads per diarization thread (small operations run fastest on one)",
    )
    workers: int = Field(
        2,
        ge=1,
        le=64,
        description="threads stepping the sessions' diarization, each with `threads` torch threads",
    )
    nice: Annotated[int, Field(ge=0, le=LOWEST_NICE)] | Idle = Field(
        IDLE,
        description="priority of the diarization threads, live and a recording's: a nice value "
        "(above 0, the ASR thread's finals take the CPU first), or idle (Linux's SCHED_IDLE: "
        "they run only on a core nothing else wants)",
    )

    def to_config(self) -> DiarizationConfig:
        """The diarizer's config (ValueError if the values contradict each other)."""
        return DiarizationConfig(
            window_s=self.window_s,
            step_s=self.step_s,
            latency_s=self.latency_s,
            closing_s=self.closing_s,
            relabel_every_s=self.relabel_every_s,
            busy_reembed_s=self.busy_reembed_s,
            clustering=ClusteringConfig(
                max_speakers=self.max_speakers,
                new_speaker_distance=self.new_speaker_distance,
                merge_distance=self.merge_distance,
                split_similarity=self.split_similarity,
                min_speaker_s=self.min_speaker_s,
            ),
            turns=TurnConfig(
                min_turn_s=self.min_turn_s,
                change_latency_s=self.change_latency_s,
                confirm_latency_s=self.confirm_latency_s or None,
                max_cut_age_s=self.max_cut_age_s or None,
            ),
        )

    @property
    def enabled(self) -> bool:
        return self.source != "off"

    @model_validator(mode="after")
    def _consistent(self) -> DiarizationSettings:
        self.to_config()  # DiarizationConfig holds the cross-field rules
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
    wyoming: WyomingSettings = WyomingSettings()
    cluster: ClusterSettings = ClusterSettings()

    @property
    def has_keys(self) -> bool:
        return bool(self.token or self.api_keys or self.api_keys_file)

    def keys_needed(self) -> str | None:
        """The first address not on loopback (``parley serve``'s, its Wyoming port's,
        ``parley cluster``'s), which needs API keys unless ``allow_anonymous``; or None."""
        wyoming = (self.wyoming.host or self.server.host) if self.wyoming.port is not None else None
        hosts = (self.server.host, wyoming or self.server.host, self.cluster.host)
        open_hosts = [host for host in hosts if not is_loopback(host)]
        return open_hosts[0] if open_hosts and not self.allow_anonymous else None

    @model_validator(mode="after")
    def _not_open_to_everyone(self) -> Settings:
        host = self.keys_needed()
        if host is not None and not self.has_keys:
            raise ValueError(
                f"refusing to serve {host} without API keys: set PARLEY_API_KEYS "
                "or --api-keys-file, or pass --allow-anonymous to let anyone stream"
            )
        if self.wyoming.port is not None and self.has_keys and self.wyoming.key is None:
            raise ValueError("Wyoming has no credentials: wyoming.key names the API key it uses")
        return self

    @model_validator(mode="after")
    def _partials_fit_segments(self) -> Settings:
        if self.asr.partial_interval_s >= self.vad.max_segment_s:
            raise ValueError("asr.partial_interval_s must be shorter than vad.max_segment_s")
        return self
