"""Known speakers' names for a recording's voices (OpenAI's ``known_speaker_names[]``
and ``known_speaker_references[]``): a caller sends a short clip of each voice it knows
(an agent, a customer), and the recording's voices that match one are labelled with its
name instead of ``S1``, ``S2``...

Each voice of the recording is embedded from its own turns, each reference from its
clip, and names go to voices one to one (the pairing with the highest total
similarity), a name only where its voice is as alike as one voice's own clips are. A
reference whose voice is not in the recording names nobody. Pure: the embeddings
come from the speaker models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_timeline import Turn

MAX_KNOWN_SPEAKERS = 4  # OpenAI's bound
REFERENCE_SECONDS = (2.0, 10.0)  # a reference clip's shortest and longest, OpenAI's
MAX_NAME_CHARS = 64
VOICE_SECONDS = 30.0  # a voice is embedded from at most this much of its turns
# The cosine past which a clip names a voice: chosen on the real voices of
# bench/devset.py's dev split (bench/known_speakers.py; bench/VARIANTS.md, "Known
# speakers"), the middle of where no absent person's name was given and the most
# present ones were (0.55 to 0.60).
MIN_SIMILARITY = 0.6


# Each known speaker's name and its clip's embedding, in the order given.
KnownVoices = tuple[tuple[str, np.ndarray], ...]


@dataclass(frozen=True)
class KnownSpeaker:
    """A name and a clip of its voice (16 kHz mono)."""

    name: str
    audio: np.ndarray = field(repr=False, compare=False)


def check_known_speakers(names: Sequence[str], clips: int) -> None:
    """ValueError unless ``names`` and the ``clips`` are one to one, at most four, each
    name given once, not empty and not too long."""
    if len(names) != clips:
        raise ValueError(
            f"{len(names)} known speaker names for {clips} references: give one of each"
        )
    if len(names) > MAX_KNOWN_SPEAKERS:
        raise ValueError(f"at most {MAX_KNOWN_SPEAKERS} known speakers")
    if len(set(names)) != len(names):
        raise ValueError("each known speaker name once")
    if any(not name.strip() or len(name) > MAX_NAME_CHARS for name in names):
        raise ValueError(f"a known speaker's name is 1 to {MAX_NAME_CHARS} characters")


def check_reference(name: str, audio: np.ndarray) -> None:
    """ValueError for a reference clip outside OpenAI's 2 to 10 seconds."""
    seconds = len(audio) / SAMPLE_RATE
    low, high = REFERENCE_SECONDS
    if not low <= seconds <= high:
        raise ValueError(
            f"the reference of {name!r} is {seconds:.1f} s: it must be {low:g} to {high:g} s"
        )


def voice_audio(audio: np.ndarray, turns: Sequence[Turn], speaker: int) -> np.ndarray:
    """The recording's audio of one speaker's turns, end to end, longest turns first, up
    to ``VOICE_SECONDS``."""
    mine = sorted((t for t in turns if t.speaker == speaker), key=lambda t: t.start - t.end)
    pieces, total = [], 0
    for turn in mine:
        piece = audio[int(turn.start * SAMPLE_RATE) : int(turn.end * SAMPLE_RATE)]
        pieces.append(piece[: int(VOICE_SECONDS * SAMPLE_RATE) - total])
        total += len(pieces[-1])
        if total >= VOICE_SECONDS * SAMPLE_RATE:
            break
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def embedded_clip(
    embed: Callable[[np.ndarray, np.ndarray], np.ndarray], clip: np.ndarray
) -> np.ndarray:
    """A whole clip's one embedding, through a speaker model's ``embed(audio, masks)``."""
    clip = clip.astype(np.float32)
    return embed(clip, np.ones((1, len(clip)), bool))[0]


def named_voices(
    voices: Mapping[int, np.ndarray],
    references: Sequence[tuple[str, np.ndarray]],
    min_similarity: float = MIN_SIMILARITY,
) -> dict[int, str]:
    """Speaker → name: each reference's embedding given to at most one voice's, the
    pairing of highest total cosine, kept where the cosine reaches ``min_similarity``."""
    speakers = [s for s, v in voices.items() if np.all(np.isfinite(v))]
    known = [(name, v) for name, v in references if np.all(np.isfinite(v))]
    if not speakers or not known:
        return {}

    def unit(vectors: list[np.ndarray]) -> np.ndarray:
        stacked = np.stack(vectors).astype(np.float64)
        return stacked / np.linalg.norm(stacked, axis=1, keepdims=True)

    similarity = unit([voices[s] for s in speakers]) @ unit([v for _, v in known]).T
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    return {
        speakers[r]: known[c][0] for r, c in zip(rows, cols) if similarity[r, c] >= min_similarity
    }
