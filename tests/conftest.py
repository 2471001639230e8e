"""Shared fixtures: the installed bundle, real engines, and real servers on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")

from parley.config import Settings  # noqa: E402
from parley.models.bundle import resolve_model  # noqa: E402


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The bundle `make install` put in place (tests fail, not skip, when it is missing)."""
    path = Path(os.environ.get("PARLEY_MODELS_DIR", Settings().models_dir))
    resolve_model("tiny.en", path)  # raises with the command to run if it is not installed
    return path


@pytest.fixture(scope="session")
def tiny_engine(models_dir):
    """The real tiny.en engine, loaded once for the in-process tests."""
    from parley.models.device import plan_device
    from parley.models.whisper_engine import WhisperEngine

    return WhisperEngine(resolve_model("tiny.en", models_dir), "tiny.en", plan_device("cpu"))


async def serve_real(models_dir: Path, token: str | None = None, **sections):
    """A real server on a free loopback port, with the real models (stop() it after)."""
    from parley.app import in_passing_thread, load_asr, load_diarization, start_server

    settings = Settings(models_dir=models_dir, token=token,
                        server={"port": 0, **sections.pop("server", {})}, **sections)
    worker, asr = await in_passing_thread(load_asr, settings)
    diarization = await in_passing_thread(load_diarization, settings)
    return await start_server(settings, worker, asr, diarization, warm_up=False)


async def serve_fake(engine=None, token: str | None = None, **sections):
    """A real server on a free loopback port, decoding with the fake engine (no model)."""
    from fake_engine import FakeEngine
    from parley.app import start_server
    from parley.runtime.scheduler import AsrScheduler
    from parley.transport.ws_server import AsrService

    engine = engine or FakeEngine()
    settings = Settings(token=token, server={"port": 0, **sections.pop("server", {})},
                        **sections)
    scheduler = AsrScheduler(engine, settings.asr.queue_size)
    return await start_server(settings, scheduler, AsrService(scheduler, engine.label,
                                                              engine.check_language),
                              warm_up=False)


@pytest.fixture
async def servers():
    """Keep the servers a test starts; stop them after it. ``await servers(server)``
    returns the server's stream URL and the server."""
    running = []

    async def keep(server):
        running.append(server)
        return f"ws://127.0.0.1:{server.port}/v1/stream", server

    yield keep
    for server in running:
        await server.stop()


def pcm16(audio):
    """float32 audio → the PCM16 bytes a client sends."""
    import numpy as np

    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def as_received(audio):
    """What the server decodes from ``pcm16(audio)`` (for comparing with what it heard)."""
    import numpy as np

    return np.frombuffer(pcm16(audio), dtype="<i2").astype(np.float32) / 32768.0


async def chunks_of(audio, seconds: float = 0.1):
    data, step = pcm16(audio), int(16000 * seconds) * 2
    for i in range(0, len(data), step):
        yield data[i:i + step]
