"""First words: does the voice activity detector clip the start of speech?

"The VAD cut off my first word" is among the complaints users of streaming Whisper
servers raise most. Each clip is one utterance after 1.5 s without speech (its segments
are the same however a client cuts it into messages), and is scored twice:

- **what the VAD keeps** (the server's own ``VadSegmenter``, no model): the clip's
  audible audio (10 ms frames within 35 dB of its loudest) that no closed segment holds,
  and how late the first segment starts after the first audible frame. The clips: every
  English studio prompt of Asterisk's Allison (a real voice, 358 prompts; a few are
  tones) and espeak-ng sentences that open with a short, soft word ("So", "Hi",
  "Fine", "Thanks") in four voices;
- **what the finals say** (``--decode``, the real engine through a server in this
  process, partials off): the espeak-ng sentences' first word, as the first word
  written; and, the control, each whole clip decoded at once with no VAD at all;
- **what the VAD keeps of what is not speech** (``nonspeech.py``'s sounds, 60 s each):
  seconds of segments a minute, the price of a less aggressive mode.

Each clip is heard as it was said, and with its first 0.4 s of speech 12 and 20 dB
softer (a talker who starts quietly, or turns to the microphone), over digital silence
and over room tone (pink noise at -55 dBFS). Variants: the server's VAD (webrtcvad
mode 3 and 300 ms of pre-roll), the same without pre-roll (``pad 0``, which shows what
the pre-roll is for), and modes 2 and 1 with the pre-roll.

Usage: python bench/onsets.py [--decode] [--model tiny.en]
(apt-get install asterisk-core-sounds-en-wav first)
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

from common import print_table, write_json

import numpy as np
from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

import vocabulary
from audio_fixtures import at_level, silence, speak
from nonspeech import PROMPTS_DIR, decoded, nonspeech, pink, texts_of
from parley.config import Settings
from parley.core.audio import SAMPLE_RATE
from parley.core.vad import VadConfig
from parley.protocol.messages import StreamConfig
from parley.recordings.file_results import segment_recording

LEAD_S = 1.5  # no speech before each clip
TAIL_S = 1.0  # nor after it, so that silence closes its segment
HOP = SAMPLE_RATE // 100  # 10 ms frames for what is audible
AUDIBLE_DB = 35.0  # a frame this far under the clip's loudest still holds speech
SOFT_S = 0.4  # how much of the start a soft onset softens
ROOM_TONE_DBFS = -55.0
SOFT_OPENINGS = [
    "So what do you think about it?",
    "Hi there, it is Sam from accounts.",
    "Fine, let us start the meeting.",
    "Thanks everyone for joining today.",
    "Honestly, I have no idea.",
    "Sure, that works for me.",
    "Well, the numbers look good.",
    "Okay, next item please.",
    "Five minutes should be enough.",
    "Hey, can you hear me now?",
    "Yes, I sent it this morning.",
    "First, a word about the budget.",
]
VOICES = ("en-us", "en-us+f3", "en-gb+m3", "en+f5")
PARLEY = "parley (mode 3, pad 300 ms)"  # the server's own VAD settings
VARIANTS = {
    PARLEY: VadConfig(),
    "pad 0": VadConfig(speech_pad_ms=0),
    "mode 2": VadConfig(aggressiveness=2),
    "mode 1": VadConfig(aggressiveness=1),
}
SOFTER_DB = (0.0, 12.0, 20.0)
WHOLE = "no VAD: the whole clip"
NORMALISE = EnglishTextNormalizer({})
DECODED = (PARLEY, "pad 0", "mode 2")  # the variants --decode streams


@dataclass(frozen=True)
class Clip:
    audio: np.ndarray
    text: str | None  # what was said, where known


def frame_db(audio: np.ndarray) -> np.ndarray:
    frames = audio[: len(audio) // HOP * HOP].reshape(-1, HOP)
    return 10 * np.log10((frames.astype(np.float64) ** 2).mean(axis=1) + 1e-12)


def heard(clip: np.ndarray, softer_db: float, room_tone: bool) -> tuple[np.ndarray, np.ndarray]:
    """The clip as streamed (lead, the clip with its onset ``softer_db`` softer, tail, over
    room tone or not) and the clip's audible 10 ms frames, found before softening: a soft
    start is still speech to keep."""
    energy = frame_db(clip)
    audible = energy > energy.max() - AUDIBLE_DB
    clip = clip.copy()
    if softer_db and audible.any():
        first = int(np.argmax(audible)) * HOP
        clip[first : first + int(SOFT_S * SAMPLE_RATE)] *= 10 ** (-softer_db / 20)
    audio = np.concatenate([silence(LEAD_S), clip, silence(TAIL_S)])
    if room_tone:
        audio = audio + at_level(pink(np.random.default_rng(0), len(audio)), ROOM_TONE_DBFS)
    return audio.astype(np.float32), audible


def segments(audio: np.ndarray, config: VadConfig) -> list[tuple[float, float]]:
    """[start, end) seconds of each segment the server's VAD closes over ``audio`` (the
    same however the audio is cut into messages)."""
    pieces, _ = segment_recording(audio, config, bridge_s=0.0)
    return [(p.start, p.end) for p in pieces]


def kept(audio: np.ndarray, audible: np.ndarray, config: VadConfig) -> dict:
    """What the VAD lost of one clip as ``heard`` gives it: audible ms outside every
    segment, and how late the first segment starts after the first audible frame (None:
    no segment at all)."""
    held = np.zeros(len(audible), dtype=bool)
    spans = segments(audio, config)
    for start, end in spans:
        held[max(0, round((start - LEAD_S) * 100)) : max(0, round((end - LEAD_S) * 100))] = True
    onset = LEAD_S + int(np.argmax(audible)) / 100
    return {
        "lost_ms": int((audible & ~held).sum()) * 10,
        "late_ms": round((spans[0][0] - onset) * 1000) if spans else None,
    }


def vad_rows(clips: dict[str, list[Clip]]) -> list[dict]:
    rows = []
    for name, group in clips.items():
        for room_tone in (False, True):
            for softer_db in SOFTER_DB:
                streamed = [heard(c.audio, softer_db, room_tone) for c in group]
                for variant, config in VARIANTS.items():
                    scores = [kept(audio, audible, config) for audio, audible in streamed]
                    lost = np.array([s["lost_ms"] for s in scores])
                    late = np.array(
                        [s["late_ms"] if s["late_ms"] is not None else 1e9 for s in scores]
                    )
                    rows.append(
                        {
                            "clips": f"{name} ({len(group)})",
                            "background": "room tone" if room_tone else "silence",
                            "onset": f"{softer_db:g} dB softer" if softer_db else "as said",
                            "variant": variant,
                            "onset_late_50ms": round(float(np.mean(late >= 50)), 3),
                            "lost_100ms": round(float(np.mean(lost >= 100)), 3),
                            "lost_ms_mean": round(float(lost.mean()), 1),
                            "unheard": int(sum(s["late_ms"] is None for s in scores)),
                        }
                    )
                    print_table(rows[-1:], list(rows[-1]))
    return rows


def noise_rows(seconds: float = 60.0) -> list[dict]:
    """What each variant keeps of sounds that are not speech (``nonspeech``'s): seconds of
    segments a minute, each a decode that may write words nobody said."""
    rows = []
    for kind, audio in nonspeech(seconds).items():
        row = {"sound": kind}
        for variant, config in VARIANTS.items():
            spans = segments(audio.astype(np.float32), config)
            row[variant] = round(sum(e - s for s, e in spans) / (len(audio) / SAMPLE_RATE / 60), 1)
        rows.append(row)
        print_table([row], list(row))
    return rows


async def first_words(model: str, clips: list[Clip]) -> list[dict]:
    """Each espeak-ng sentence streamed through a server in this process, per onset and
    background, in each ``DECODED`` variant: its first word kept."""
    from parley.app import start_server
    from parley.loading import load_asr
    from parley.workers.threads import in_passing_thread

    rows = []
    for variant in DECODED:
        config = VARIANTS[variant]
        settings = Settings(
            server={"port": 0, "admit_by_capacity": False},
            asr={"model": model},
            vad={"aggressiveness": config.aggressiveness, "speech_pad_ms": config.speech_pad_ms},
        )
        worker, asr = await in_passing_thread(load_asr, settings)
        server = await start_server(settings, worker, asr, None, warm_up=True)
        try:
            for room_tone in (False, True):
                for softer_db in SOFTER_DB:
                    streamed = [heard(c.audio, softer_db, room_tone)[0] for c in clips]
                    texts = await texts_of(server.port, streamed)
                    rows.append(first_word_row(model, variant, room_tone, softer_db, clips, texts))
        finally:
            await server.stop()
    # The control: each whole clip (its 1.5 s lead included) decoded at once, no VAD.
    whole = vocabulary.engine(model)
    for room_tone in (False, True):
        for softer_db in SOFTER_DB:
            texts = [
                vocabulary.decode(whole, heard(c.audio, softer_db, room_tone)[0], StreamConfig())[0]
                for c in clips
            ]
            rows.append(first_word_row(model, WHOLE, room_tone, softer_db, clips, texts))
    return rows


def first_word_row(
    model: str, variant: str, room_tone: bool, softer_db: float, clips: list[Clip], texts: list[str]
) -> dict:
    """How many of the clips' texts begin with the word said first (normalised as WER is
    scored: "five" and "5" are one word), and the first misses."""
    said = [NORMALISE(c.text or "").split()[:1] for c in clips]
    written = [NORMALISE(t).split()[:1] for t in texts]
    row = {
        "model": model,
        "background": "room tone" if room_tone else "silence",
        "onset": f"{softer_db:g} dB softer" if softer_db else "as said",
        "variant": variant,
        "sentences": len(clips),
        "first_word_kept": round(float(np.mean([w == s for w, s in zip(written, said)])), 3),
        "missed": "; ".join(
            f"{' '.join(s)} → {' '.join(w)}" for w, s in zip(written, said) if w != s
        )[:120],
    }
    print_table([row], list(row))
    return row


def espeak_clips() -> list[Clip]:
    return [Clip(speak(line, voice), line) for voice in VOICES for line in SOFT_OPENINGS]


def prompt_clips() -> list[Clip]:
    files = sorted(PROMPTS_DIR.glob("*.wav"))
    if not files:
        raise SystemExit(
            f"no prompts in {PROMPTS_DIR}: apt-get install asterisk-core-sounds-en-wav"
        )
    return [Clip(decoded(f), None) for f in files]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decode", action="store_true", help="also score the finals' first words")
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    sentences = espeak_clips()
    clips = {"Allison's prompts (real)": prompt_clips(), "espeak-ng, soft openings": sentences}
    rows = vad_rows(clips)
    sounds = noise_rows()
    decoded_rows = asyncio.run(first_words(args.model, sentences)) if args.decode else []
    print()
    print_table(rows, list(rows[0]))
    print("\nseconds of segments a minute of sound that is not speech:")
    print_table(sounds, list(sounds[0]))
    if decoded_rows:
        print()
        print_table(decoded_rows, list(decoded_rows[0]))
    path = write_json(
        "onsets",
        {"vad": rows, "not_speech": sounds, "first_words": decoded_rows},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
