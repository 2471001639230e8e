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
    import asyncio

    from parley.app import load_asr, load_diarization, start_server

    settings = Settings(models_dir=models_dir, token=token,
                        server={"port": 0, **sections.pop("server", {})}, **sections)
    worker, asr = await asyncio.to_thread(load_asr, settings)
    diarization = await asyncio.to_thread(load_diarization, settings)
    return await start_server(settings, worker, asr, diarization)
