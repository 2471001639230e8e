"""What a pipeline is given, read from the settings: the loaded models (ASR and, when on,
diarization) and the access policy (API keys, origins). ``parley serve``, each cluster
replica and ``parley transcribe`` all load through here."""

from __future__ import annotations

import logging
import os
import re
import time

from parley.config import Settings
from parley.core.policy import AsrThreads
from parley.sessions.streams import AsrService
from parley.transport import access_tokens
from parley.transport.admission import Access
from parley.transport.auth import ApiKeys, OriginPolicy, read_key_file
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler
from parley.workers.threads import ThreadSwitch

log = logging.getLogger(__name__)


def load_asr(settings: Settings) -> tuple[AsrScheduler, AsrService]:
    """Load the engine (slow, blocking: call it off the event loop)."""
    from transformers.utils.logging import disable_progress_bar

    from parley.models.device import DEFAULT_THREADS, plan_device, set_threads
    from parley.models.whisper_engine import WhisperEngine
    from parley.weights.bundle import resolve_model

    # transformers draws a bar per checkpoint loaded ("Loading weights: 167/167"), into
    # the server's log and between `parley transcribe`'s own progress bars; the log line
    # below says what is loading.
    disable_progress_bar()

    plan = plan_device(settings.asr.device, settings.asr.compute_type)
    asr = settings.asr
    source = resolve_model(asr.model, settings.models_dir)
    assistant = resolve_model(asr.assistant, settings.models_dir) if asr.assistant else None
    log.info(
        "loading %s from %s on %s%s",
        asr.model,
        source,
        plan.description,
        f", assistant {asr.assistant}" if assistant else "",
    )
    engine = WhisperEngine(
        source,
        asr.model,
        plan,
        assistant_source=assistant,
        assistant_label=asr.assistant,
        assistant_languages=frozenset(asr.assistant_languages) if asr.assistant_languages else None,
        max_draft=asr.max_draft,
        max_rows=asr.max_batch,
        cuda_graphs=asr.cuda_graphs,
        window_margin_s=asr.window_margin_s,
    )
    threads = asr_threads(settings)
    switch = None
    if plan.device.type == "cpu" and threads is not None and threads < DEFAULT_THREADS:
        switch = ThreadSwitch(AsrThreads(threads, DEFAULT_THREADS, asr.burst_finals), set_threads)
    scheduler = AsrScheduler(
        engine,
        asr.queue_size,
        target_busy=asr.target_busy,
        short_finals=asr.short_final_windows,
        short_finals_busy=asr.short_finals_busy,
        on_thread_start=lambda: set_threads(threads),
        threads=switch,
    )
    return scheduler, AsrService(scheduler, settings.asr.model)


def asr_threads(settings: Settings) -> int | None:
    """The ASR thread's torch threads: as configured; else, with diarization on, the cores
    its thread leaves free, because two model threads busy on the same cores slow each
    other down (bench/VARIANTS.md, "Serving capacity with speaker labels");
    else torch's default (None)."""
    from parley.models.device import DEFAULT_THREADS

    if settings.asr.threads or not settings.diarization.enabled:
        return settings.asr.threads
    return max(1, DEFAULT_THREADS - settings.diarization.threads)


def load_diarization(settings: Settings):
    """The diarization worker, or None when it is off (then pyannote is never imported)."""
    if not settings.diarization.enabled:
        return None
    from parley.models.device import plan_device, set_threads
    from parley.models.speaker_models import load_speaker_models
    from parley.workers.threads import lower_priority

    d = settings.diarization
    # CAM++ and the segmentation gain nothing from bfloat16: they run, and log, float32
    plan = plan_device(settings.asr.device, "float32")
    log.info("loading diarization models (%s) on %s", d.source, plan.description)
    models = load_speaker_models(d.source, settings.models_dir, plan.device)

    def on_thread_start() -> None:
        set_threads(d.threads)
        lower_priority(d.nice)

    # One torch thread on the CPU computes on the calling thread, whose CPU time is then
    # the step's work (DiarizationWorker's cost_clock).
    on_its_thread = plan.device.type == "cpu" and d.threads == 1
    return DiarizationWorker(
        models,
        d.to_config(),
        capacity=2 * settings.server.max_sessions,
        on_thread_start=on_thread_start,
        threads=d.workers,
        cost_clock=time.thread_time if on_its_thread else time.perf_counter,
    )


def access_of(settings: Settings) -> Access:
    """The API keys (PARLEY_TOKEN, the key file, PARLEY_API_KEYS) and allowed origins;
    ValueError on a malformed key file or a name given twice."""
    named: dict[str, str] = {}
    sources = [
        {"token": settings.token.get_secret_value()} if settings.token else {},
        read_key_file(settings.api_keys_file) if settings.api_keys_file else {},
        {n: v.get_secret_value() for n, v in settings.api_keys.items()},
    ]
    for source in sources:
        for name, value in source.items():
            if name in named:
                raise ValueError(f"API key name {name!r} is given twice")
            named[name] = value
    host = settings.keys_needed()
    if host is not None and not named:  # a key file of comments would let anyone in
        raise ValueError(
            f"refusing to serve {host} without API keys: {settings.api_keys_file} holds none"
        )
    keys, origins = ApiKeys.of(named), OriginPolicy.of(settings.server.allowed_origins)
    if settings.api_keys_file is None:
        return Access(keys, origins)
    return Access(keys, origins, settings.api_keys_file, lambda: access_of(settings).keys)


def redaction_of(
    access: Access, settings: Settings
) -> tuple[list[str], tuple[re.Pattern[str], ...]]:
    """Every secret the process knows, and the pattern of those it makes (access
    tokens, as good as their key until they expire), for the log filter that redacts
    them."""
    others = (settings.webhooks.secret, settings.twilio.auth_token)
    secrets = [
        *access.keys.values,
        os.environ.get("HF_TOKEN", ""),
        *(secret.get_secret_value() for secret in others if secret is not None),
    ]
    return secrets, (access_tokens.PATTERN,)
