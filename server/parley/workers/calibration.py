"""The ASR scheduler's warm-up: time the engine before serving.

First passes pay for lazy initialisation; and the encoder's cost per batch size
decides whether admitted clips share a pass (``policy.encoder_batch_size``). Sizes
double while the newest is the one that policy would choose with every row waiting: a
larger one would need a gain per clip that batching on a CPU no longer gives, and a
GPU, where a batch costs little more than one clip, times them all. The plain steps
timed on the way seed the step cost model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from parley.core.asr import AsrRequest, Transcriber
from parley.core.attempts import transcribe
from parley.core.audio import SAMPLE_RATE
from parley.core.costs import EncoderCosts, StepCostModel
from parley.core.policy import encoder_batch_size

log = logging.getLogger(__name__)
WARM_UP_SECONDS = 2.0  # of synthetic audio the warm-up decodes
CALIBRATION_REPEATS = 2  # encoder passes timed per batch size


def calibrate(
    engine: Transcriber,
    step_cost: StepCostModel,
    encoder_cost: EncoderCosts,
    clock: Callable[[], float],
) -> None:
    """Decode once untimed, then time encoder passes of 1, 2, 4… clips (and one plain
    step each) into ``encoder_cost`` and ``step_cost``; raises what the engine raises."""
    rng = np.random.default_rng(0)
    noise = (0.01 * rng.standard_normal(int(WARM_UP_SECONDS * SAMPLE_RATE))).astype(np.float32)
    # Whole windows: the capacity's first estimates count passes of a full window.
    request = AsrRequest(noise, whole_window=True)
    transcribe(engine, request)  # lazy initialisation is not part of any cost
    clips = 1
    while clips <= engine.max_rows:
        timings = []
        for _ in range(CALIBRATION_REPEATS):
            began = clock()
            decodes = engine.start([request] * clips)
            timings.append(clock() - began)
            running = [d for d in decodes if not d.finished]
            if running:  # seeds the step cost model with plain steps of this width
                began = clock()
                engine.step(running, [0] * len(running))
                step_cost.observe(len(running), len(running), clock() - began)
            for decode in decodes:
                engine.drop(decode)
        encoder_cost.observe(clips, min(timings))
        if encoder_batch_size(engine.max_rows, encoder_cost.known) != clips:
            break
        clips *= 2
    log.info(
        "encoder seconds by batch size: %s",
        {n: round(seconds, 3) for n, seconds in sorted(encoder_cost.known.items())},
    )
