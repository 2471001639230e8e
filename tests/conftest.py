"""Shared fixtures: the installed bundle, real engines, and real servers on loopback."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

# Hypothesis imports its optimiser lazily, in the middle of a test, and pytest compiles it
# there (it rewrites asserts in plugin packages). Python 3.11's compiler can then fail with
# "AST constructor recursion depth mismatch" (CPython gh-106905, pytest #10763); seen on a
# clean checkout, where no bytecode is cached. Importing it here compiles it up front.
import hypothesis.internal.conjecture.optimiser  # noqa: F401
import pytest
from hypothesis import HealthCheck, settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")

from parley.config import Settings
from parley.protocol.messages import Final, parse
from parley.weights.bundle import resolve_model

if TYPE_CHECKING:
    from fake_engine import FakeEngine

# Property tests check what is computed, not how fast: the suite runs three workers on
# two cores beside real models, where one example or one draw may take a second (a
# clean clone's run failed a health check on a 1.1 s draw). Speed is the benches' job.
settings.register_profile("parley", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("parley")


def pytest_collection_modifyitems(config, items):
    """Every test that reaches the installed bundle (through ``models_dir``, directly or
    by another fixture) is marked ``weights``: ``make test-fast`` runs the others."""
    for item in items:
        if "models_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.weights)


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The bundle `make install` put in place (tests fail, not skip, when it is missing)."""
    path = Path(os.environ.get("PARLEY_MODELS_DIR", Settings().models_dir))
    resolve_model("tiny.en", path)  # raises with the command to run if it is not installed
    return path


@pytest.fixture(scope="session")
def tiny_engine(models_dir):
    """The real tiny.en engine, loaded once for the in-process tests: in float32 on every
    machine, so that their words are the same on a CPU with AMX (where ``auto`` would
    run the encoder in bfloat16, a word here and there read otherwise) and one without.
    Servers the tests start take ``auto``; bfloat16's own tests are test_int8's."""
    from parley.models.device import plan_device
    from parley.models.whisper_engine import WhisperEngine

    return WhisperEngine(
        resolve_model("tiny.en", models_dir), "tiny.en", plan_device("cpu", "float32")
    )


# The share of its ASR thread a real test server's partials may fill. Streaming sample.wav
# (30 s) in real time kept the ASR thread busy for 19 s of CPU at the server's default
# (0.8), and 13 s at 0.3: CPU the two other test workers on these two cores wait for.
SHARED_TARGET_BUSY = 0.3
# The same for a `parley serve` the tests start in its own process.
SHARED_SERVER_ENV = {"PARLEY_ASR__TARGET_BUSY": str(SHARED_TARGET_BUSY)}


async def serve_real(models_dir: Path, token: str | None = None, **sections):
    """A real server on a free loopback port, with the real models (stop() it after)."""
    from parley.app import start_server
    from parley.loading import load_asr, load_diarization
    from parley.workers.threads import in_passing_thread

    # Without admission by measured capacity: these servers are shared by tests that
    # stream faster than real time, on a machine the other tests load too; what the
    # admission does is test_capacity's. For the same reason partials fill less of the
    # ASR thread's idle time (SHARED_TARGET_BUSY); how they are paced is test_policy's
    # and test_scheduler's.
    settings = Settings(
        models_dir=models_dir,
        token=token,
        server={"port": 0, "admit_by_capacity": False, **sections.pop("server", {})},
        asr={"target_busy": SHARED_TARGET_BUSY, **sections.pop("asr", {})},
        **sections,
    )
    worker, asr = await in_passing_thread(load_asr, settings)
    diarization = await in_passing_thread(load_diarization, settings)
    return await start_server(settings, worker, asr, diarization, warm_up=False)


async def serve_fake(engine=None, token: str | None = None, **sections):
    """A real server on a free loopback port, decoding with the fake engine (no model)."""
    from fake_engine import load_fake_asr
    from parley.app import start_server
    from parley.sessions.streams import AsrService
    from parley.workers.scheduler import AsrScheduler

    settings = Settings(token=token, server={"port": 0, **sections.pop("server", {})}, **sections)
    if engine is None:
        scheduler, asr = load_fake_asr(settings)
    else:
        scheduler = AsrScheduler(engine, settings.asr.queue_size)
        asr = AsrService(scheduler, engine.label)
    return await start_server(settings, scheduler, asr, warm_up=False)


@pytest.fixture(scope="module")
def threaded_fake_port():
    """The port of a fake-engine server on a thread (and event loop) of its own, for a
    module's synchronous clients (hypothesis examples are synchronous)."""
    import asyncio
    import threading

    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def run():
        holder["server"] = await serve_fake()
        holder["stop"] = asyncio.Event()
        started.set()
        await holder["stop"].wait()
        await holder["server"].stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(60)
    yield holder["server"].port
    loop.call_soon_threadsafe(holder["stop"].set)
    thread.join(30)


@pytest.fixture(scope="session")
async def diarized_server(models_dir):
    """One real server for the whole run, with the real ASR and speaker models (sessions
    keep their own speakers, so tests can share it), and its Wyoming port."""
    server = await serve_real(models_dir, diarization={"source": "bundle"}, wyoming={"port": 0})
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def diarized_base(diarized_server) -> str:
    """The shared real server's HTTP address."""
    return f"http://127.0.0.1:{diarized_server.port}"


def deepgram_environment(base: str):
    """deepgram-sdk's endpoints, all pointed at the server at ``base`` (http://...)."""
    from deepgram.environment import DeepgramClientEnvironment

    return DeepgramClientEnvironment(
        base=base, production=f"ws://{base[7:]}", agent=f"ws://{base[7:]}", agent_rest=base
    )


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
        yield data[i : i + step]


@pytest.fixture
def start(servers):
    """Start fake-engine servers on port 0 with setting overrides (stopped after)."""

    async def _start(engine: FakeEngine | None = None, token: str | None = None, **sections):
        return await servers(await serve_fake(engine, token, **sections))

    return _start


@pytest.fixture(scope="module")
def talk():
    """Three turns with pauses between them, and the audio as the server will decode it."""
    from audio_fixtures import conversation

    audio, truth = conversation(
        [
            ("en-us", "The cat sat on the mat."),
            ("en-us", "The train leaves from platform number nine."),
            ("en-us", "Good morning, everyone."),
        ],
        gap_s=0.8,
    )
    return as_received(audio), truth


async def refused(url: str, **connect_args) -> tuple[dict, int]:
    """Connect, expect an error message then a close; return both."""
    async with connect(url, **connect_args) as ws:
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        return message, ws.close_code


def heard_between(audio, start: float, end: float) -> str:
    """What the fake engine hears between two stream times of ``audio``."""
    from fake_engine import hear, text_of

    return text_of(
        [token for token, _, _ in hear(audio[round(start * 16000) : round(end * 16000)])]
    )


def wire_finals(messages: list[dict]) -> list[Final]:
    """The finals among messages read off the wire as JSON objects, typed."""
    return [parse(m) for m in messages if m["type"] == "final"]


def assert_finals_are_their_audio(finals: list[Final], audio) -> None:
    assert finals
    for final in finals:
        assert final.text == heard_between(audio, final.start, final.end)
