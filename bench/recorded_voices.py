"""Real recorded voices that Debian packages carry, for the speaker development set.

Two sources, one per split, so that the held-out voices are never tuned on:

- ``dev``: KTuberling's spoken words (``ktuberling-data``), each language read by its
  own volunteer: short words (0.4 to 2 s), joined into turns of a few words;
- ``heldout``: Asterisk's studio prompts (``asterisk-core-sounds-*-wav`` and the
  ``asterisk-prompt-*`` packages), each voice a professional speaker reading whole
  sentences, at 8 kHz. One speaker, Allison, reads two languages: both are one voice.

``apt-get install ktuberling-data asterisk-core-sounds-en-wav asterisk-core-sounds-fr-wav
asterisk-core-sounds-it-wav asterisk-core-sounds-ru-wav asterisk-core-sounds-es-wav
asterisk-prompt-es-co asterisk-prompt-fr-armelle asterisk-prompt-it-menardi-wav`` brings
them. Clips are decoded once by ffmpeg to 16 kHz mono and cached beside the set.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
CACHE = Path(__file__).resolve().parent / "results" / "devset-cache" / "recorded"
KTUBERLING = Path("/usr/share/ktuberling/sounds")
ASTERISK = Path("/usr/share/asterisk/sounds")
AUDIO_SUFFIXES = (".ogg", ".wav", ".gsm")


@dataclass(frozen=True)
class RecordedVoice:
    """One real person's recordings: where they are, and how a turn is made of them."""

    name: str
    folders: tuple[Path, ...]
    words: bool  # short single words (joined into turns) rather than whole sentences


# KTuberling languages with at least 70 clips (the smaller ones repeat a handful of words).
KTUBERLING_LANGUAGES = ("ca", "da", "de", "el", "en", "fr", "gl", "lt", "ru", "sl", "uk", "wa")

VOICES = {
    "dev": [
        RecordedVoice(f"ktuberling-{lang}", (KTUBERLING / lang,), True)
        for lang in KTUBERLING_LANGUAGES
    ],
    "heldout": [
        RecordedVoice(
            "asterisk-allison", (ASTERISK / "en_US_f_Allison", ASTERISK / "es_MX_f_Allison"), False
        ),
        RecordedVoice("asterisk-june", (ASTERISK / "fr_CA_f_June",), False),
        RecordedVoice("asterisk-menardi", (ASTERISK / "it_IT_f_Menardi",), False),
        RecordedVoice("asterisk-carlo", (ASTERISK / "it_IT_m_Carlo",), False),
        RecordedVoice("asterisk-ivrvoice", (ASTERISK / "ru_RU_f_IvrvoiceRU",), False),
        RecordedVoice("asterisk-es-co", (ASTERISK / "es",), False),
        RecordedVoice("asterisk-armelle", (ASTERISK / "fr",), False),
    ],
}


def available(split: str) -> list[RecordedVoice]:
    """The split's voices whose package is installed."""
    return [v for v in VOICES[split] if all(folder.is_dir() for folder in v.folders)]


@cache
def clips(voice: RecordedVoice) -> tuple[Path, ...]:
    """Every recording of ``voice``, in a fixed order (listed once: a turn draws from it)."""
    return tuple(
        sorted(
            path
            for folder in voice.folders
            for path in folder.iterdir()
            if path.suffix in AUDIO_SUFFIXES and path.is_file()
        )
    )


def decode(path: Path) -> np.ndarray:
    """One clip at 16 kHz mono float32, silence at both ends trimmed (cached)."""
    key = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    cached = CACHE / f"{key}.npy"
    if not cached.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        raw_gsm = ["-f", "gsm"] if path.suffix == ".gsm" else []  # headerless GSM 06.10
        raw = subprocess.run(
            ["ffmpeg", "-nostdin", "-v", "error", *raw_gsm, "-i", str(path)]
            + ["-ac", "1", "-ar", str(SAMPLE_RATE), "-f", "f32le", "-"],
            check=True,
            capture_output=True,
        ).stdout
        np.save(cached, trim(np.frombuffer(raw, np.float32)))
    return np.load(cached)


def trim(audio: np.ndarray, floor_db: float = -40.0) -> np.ndarray:
    """``audio`` without the quiet ends (below ``floor_db`` of its peak)."""
    peak = float(np.abs(audio).max()) if len(audio) else 0.0
    loud = np.flatnonzero(np.abs(audio) > peak * 10 ** (floor_db / 20))
    return audio[loud[0] : loud[-1] + 1].copy() if len(loud) else audio[:0]


def turn(
    voice: RecordedVoice, rng: np.random.Generator, short: bool
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """One turn in ``voice``, at a common loudness: a sentence or two, or two to six words
    with short pauses (one word or one short prompt when ``short``); and the samples
    each recording spans in it."""
    paths = clips(voice)
    if voice.words:
        count = 1 if short else int(rng.integers(2, 7))
    else:
        count = 1 if short else int(rng.integers(1, 3))
    pieces: list[np.ndarray] = []
    stretches: list[tuple[int, int]] = []
    cursor = 0
    while len(stretches) < count:
        clip = decode(paths[int(rng.integers(len(paths)))])
        if len(clip) < 0.25 * SAMPLE_RATE or (short and len(clip) > 1.5 * SAMPLE_RATE):
            continue
        if pieces:
            pause = rng.uniform(0.08, 0.25) if voice.words else rng.uniform(0.2, 0.5)
            pieces.append(np.zeros(int(pause * SAMPLE_RATE), np.float32))
            cursor += len(pieces[-1])
        pieces.append(clip)
        stretches.append((cursor, cursor + len(clip)))
        cursor += len(clip)
    speech = np.concatenate(pieces)
    rms = float(np.sqrt(np.mean(speech[np.abs(speech) > 1e-4] ** 2)))
    return (speech * (0.08 / max(rms, 1e-6))).astype(np.float32), stretches
