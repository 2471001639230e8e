"""Words written where nobody spoke: sounds that are not speech streamed through the
server, speech over them, and real short prompts that must keep their words.

Whisper writes text over what is not speech ("Thank you.", " you", a song's invented
lyrics); it is the complaint users of Whisper servers raise most. Each sound is
streamed through a server in this process, on the real engine and the server's own
stream path (webrtcvad, the decode, its guards), as fast as it takes audio, partials
off:

- not speech: digital silence; room tone (pink noise at -60 dBFS); white noise at -30
  dBFS; pink noise; a crowd's murmur (four voices at once, low-passed) near, at -20
  dBFS, and far off, at -40; synthetic chords; **real music** (the game soundtracks of
  Debian's ``asc-music``, instrumental); **real alert sounds**
  (``sound-theme-freedesktop``'s bells, chimes and ring tones, 1 s apart; its spoken
  channel names left out). At -20 dBFS RMS, speech's level here, unless said;
- speech, to show that what keeps words out of the sounds keeps the speech's: a
  monologue of five espeak-ng sentences alone, over the real music 12 dB below it, over
  the crowd 12 dB below it; a meeting's talk (two espeak-ng voices, eight sentences, 4 s
  pauses) with a far crowd 20 dB below it filling its pauses; sample.wav (real speech);
- **real prompts**: each of the English studio prompts of Asterisk's Allison
  (``asterisk-core-sounds-en-wav``: "Thank you.", "Goodbye.", whole sentences; a few
  are tones) streamed alone. A prompt that gives text without guards and none with
  them is a prompt the guards dropped; they are listed.

Variants (``--variants``): ``parley``, the server's guards (``core.quality``);
``no-level``, the same without the rule for doubtful text far under the stream's speech
(``core.speech_level``); ``before``, without that nor the rules for Whisper's stock
phrases (``core.stock_phrases``) and for short texts decoded with doubt; ``openai``,
openai/whisper's rules alone (no-speech probability over 0.6 with a mean
log-probability under -1, or compression over 2.4); ``none``, no guard at all.

Reports, for each model, kind and variant: the finals with text, their words, words a
minute of sound and the most frequent texts; for speech, WER; for the prompts, those
with text and those dropped.
Usage: python bench/nonspeech.py [--models tiny.en base] [--variants ...] [--seconds 60]
(apt-get install asc-music sound-theme-freedesktop asterisk-core-sounds-en-wav first)
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from collections import Counter
from pathlib import Path

from common import machine, print_table, write_json

import numpy as np

from audio_fixtures import (
    TALK_LINES,
    at_level,
    monologue,
    read_wav,
    sample_dir,
    sample_reference_text,
    silence,
    talk_over_far_crowd,
    wer,
)
from conftest import chunks_of
from diarization import BACKGROUND_DB, background
from parley.config import Settings
from parley.core.quality import QualityGuards

SAMPLE_RATE = 16000
LEVEL_DBFS = -20.0  # a sound's RMS: about a close talker's speech
MUSIC_DIR = Path("/usr/share/games/asc/music")
ALERTS_DIR = Path("/usr/share/sounds/freedesktop/stereo")
SPOKEN_ALERTS = ("audio-channel-", "audio-test-signal")  # a voice reads these
PROMPTS_DIR = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
NEVER = float("-inf")  # a log-probability no decode is under: the rule never applies
VARIANTS = {
    "parley": QualityGuards(),
    # Without the rule for doubtful text far under the stream's speech.
    "no-level": QualityGuards(quiet_doubt_logprob=NEVER),
    # Without it nor the rules for stock phrases and doubtful short texts.
    "before": QualityGuards(
        stock_phrase_logprob=NEVER, short_doubt_logprob=NEVER, quiet_doubt_logprob=NEVER
    ),
    # openai/whisper's rules: no certain-no-speech bar, no stricter bar for short texts.
    "openai": QualityGuards(
        certain_no_speech=2.0,
        short_text_tokens=-1,
        stock_phrase_logprob=NEVER,
        quiet_doubt_logprob=NEVER,
    ),
    "none": None,
}


def decoded(path: Path) -> np.ndarray:
    """Any file ffmpeg reads, as 16 kHz mono float32."""
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "f32le", "-ac", "1", "-ar", "16000", "-"],
        check=True,
        capture_output=True,
    ).stdout
    return np.frombuffer(pcm, dtype=np.float32).copy()


def real_music(seconds: float) -> np.ndarray:
    """Equal stretches of each of asc-music's tracks, from 20 s into each."""
    tracks = sorted(MUSIC_DIR.glob("*.mp3"))
    if not tracks:
        raise SystemExit(f"no music in {MUSIC_DIR}: apt-get install asc-music")
    share = int(seconds * SAMPLE_RATE / len(tracks))
    start = 20 * SAMPLE_RATE
    return np.concatenate([decoded(t)[start : start + share] for t in tracks])


def alerts(seconds: float) -> np.ndarray:
    """freedesktop's alert sounds in turn, 1 s of silence after each, each at the level."""
    sounds = [p for p in sorted(ALERTS_DIR.glob("*.oga")) if not p.name.startswith(SPOKEN_ALERTS)]
    if not sounds:
        raise SystemExit(f"no sounds in {ALERTS_DIR}: apt-get install sound-theme-freedesktop")
    pieces, total = [], 0
    while total < seconds * SAMPLE_RATE:
        sound = at_level(decoded(sounds[len(pieces) // 2 % len(sounds)]), LEVEL_DBFS)
        pieces += [sound, silence(1.0)]
        total += len(sound) + SAMPLE_RATE
    return np.concatenate(pieces)[: int(seconds * SAMPLE_RATE)]


def pink(rng: np.random.Generator, samples: int) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1))
    return np.fft.irfft(spectrum, samples)


def nonspeech(seconds: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    n = int(seconds * SAMPLE_RATE)
    return {
        "silence": silence(seconds),
        "room tone (pink, -60 dBFS)": at_level(pink(rng, n), -60),
        "white noise (-30 dBFS)": at_level(rng.standard_normal(n), -30),
        "pink noise": at_level(pink(rng, n), LEVEL_DBFS),
        "crowd murmur": at_level(background("crowd", n), LEVEL_DBFS),
        "crowd murmur, far (-40 dBFS)": at_level(background("crowd", n), -40),
        "synthetic chords": at_level(background("music", n), LEVEL_DBFS),
        "real music (asc-music)": at_level(real_music(seconds * 2), LEVEL_DBFS),
        "alert sounds (freedesktop)": alerts(seconds),
    }


def speech() -> dict[str, tuple[np.ndarray, str]]:
    audio, truth = monologue()
    text = " ".join(u.text for u in truth)
    level = float(np.sqrt(np.mean(audio[np.abs(audio) > 0.01] ** 2)))
    under = 20 * np.log10(level) + BACKGROUND_DB
    music = at_level(real_music(len(audio) / SAMPLE_RATE), under)[: len(audio)]
    crowd = at_level(background("crowd", len(audio)), under)
    talk, turns = talk_over_far_crowd(len(TALK_LINES))
    return {
        "monologue": (audio, text),
        "monologue over real music": (audio + np.pad(music, (0, len(audio) - len(music))), text),
        "monologue over crowd": (audio + crowd, text),
        "talk, a far crowd in its pauses": (talk, " ".join(u.text for u in turns)),
        "sample.wav (real)": (read_wav(sample_dir() / "sample.wav"), sample_reference_text()),
    }


async def finals_of(port: int, audio: np.ndarray) -> list[str]:
    from parley.client.stream import run_stream

    url = f"ws://127.0.0.1:{port}/v1/stream?partials=false"
    result = await run_stream(url, chunks_of(audio), SAMPLE_RATE * 2, fast=True)
    if result.errors:
        raise RuntimeError(f"the stream failed: {result.errors}")
    return [f.text for f in result.finals if f.text.strip()]


def row(
    model: str, variant: str, kind: str, audio: np.ndarray, texts: list[str], said: str | None
) -> dict:
    """A sound's finals with text and words a minute, or, for speech (``said``), its WER."""
    words = sum(len(t.split()) for t in texts)
    minutes = len(audio) / SAMPLE_RATE / 60
    common = Counter(t.strip() for t in texts).most_common(3)
    return {
        "model": model,
        "kind": kind,
        "variant": variant,
        "seconds": round(len(audio) / SAMPLE_RATE, 1),
        "finals_with_text": len(texts),
        "words": words,
        "words_a_minute": None if said is not None else round(words / minutes, 2),
        "wer": None if said is None else round(wer(said, " ".join(texts)), 3),
        "most_frequent": "" if said is not None else "; ".join(f"{t!r} ×{n}" for t, n in common),
    }


def prompts() -> dict[str, np.ndarray]:
    """Allison's English prompts, each with half a second of silence either side."""
    files = sorted(PROMPTS_DIR.glob("*.wav"))
    if not files:
        raise SystemExit(
            f"no prompts in {PROMPTS_DIR}: apt-get install asterisk-core-sounds-en-wav"
        )
    pad = silence(0.5)
    return {f.stem: np.concatenate([pad, decoded(f), pad]) for f in files}


async def texts_of(port: int, clips: list[np.ndarray]) -> list[str]:
    """Each clip's finals' text, four streams at a time (the server batches their decodes)."""
    gate = asyncio.Semaphore(4)

    async def one(audio: np.ndarray) -> str:
        async with gate:
            return " ".join(await finals_of(port, audio))

    return list(await asyncio.gather(*(one(a) for a in clips)))


async def prompt_texts(port: int, clips: dict[str, np.ndarray]) -> dict[str, str]:
    """Each prompt's text."""
    return dict(zip(clips, await texts_of(port, list(clips.values())), strict=True))


def prompt_rows(model: str, texts: dict[str, dict[str, str]]) -> list[dict]:
    """A row a variant: prompts with text, and those that lost it against no guard."""
    plain = texts.get("none")
    rows = []
    for variant, by_prompt in texts.items():
        dropped = [p for p, t in by_prompt.items() if plain and plain[p] and not t]
        rows.append(
            {
                "model": model,
                "kind": f"real prompts ({len(by_prompt)})",
                "variant": variant,
                "finals_with_text": sum(1 for t in by_prompt.values() if t),
                "dropped": len(dropped) if plain else None,
                "most_frequent": "; ".join(f"{p}: {plain[p]!r}" for p in dropped) if plain else "",
            }
        )
    return rows


async def run_model(model: str, variants: list[str], seconds: float) -> list[dict]:
    from parley.app import start_server
    from parley.loading import load_asr
    from parley.workers.threads import in_passing_thread

    settings = Settings(server={"port": 0, "admit_by_capacity": False}, asr={"model": model})
    worker, asr = await in_passing_thread(load_asr, settings)
    server = await start_server(settings, worker, asr, None, warm_up=True)
    sounds, spoken, clips = nonspeech(seconds), speech(), prompts()
    rows, prompted = [], {}
    try:
        for variant in variants:
            worker.engine.guards = VARIANTS[variant]
            for kind, audio in sounds.items():
                texts = await finals_of(server.port, audio)
                rows.append(row(model, variant, kind, audio, texts, None))
                print_table(rows[-1:], list(rows[-1]))
            for kind, (audio, text) in spoken.items():
                texts = await finals_of(server.port, audio)
                rows.append(row(model, variant, kind, audio, texts, text))
                print_table(rows[-1:], list(rows[-1]))
            prompted[variant] = await prompt_texts(server.port, clips)
    finally:
        await server.stop()
    return rows + prompt_rows(model, prompted)


COLUMNS = [
    "model",
    "kind",
    "variant",
    "seconds",
    "finals_with_text",
    "words",
    "words_a_minute",
    "wer",
    "dropped",
    "most_frequent",
]


def summary(rows: list[dict]) -> list[dict]:
    """One row a model and kind, a column a variant: words a minute of a sound, WER of
    speech, prompts with text (and dropped) of the prompts."""
    table: dict[tuple[str, str], dict] = {}
    for r in rows:
        line = table.setdefault((r["model"], r["kind"]), {"model": r["model"], "kind": r["kind"]})
        if r.get("wer") is not None:
            line[r["variant"]] = f"WER {r['wer']:.3f}"
        elif "dropped" in r:
            dropped = "" if r["dropped"] is None else f" ({r['dropped']} dropped)"
            line[r["variant"]] = f"{r['finals_with_text']}{dropped}"
        else:
            line[r["variant"]] = f"{r['words_a_minute']:.1f} words/min"
    return list(table.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seconds", type=float, default=60.0, help="of each sound")
    args = parser.parse_args()
    rows: list[dict] = []
    for model in args.models:
        rows += asyncio.run(run_model(model, args.variants, args.seconds))
    print()
    print_table(rows, COLUMNS)
    print()
    print_table(summary(rows), ["model", "kind", *args.variants])
    path = write_json("nonspeech", {"machine": machine(), "seconds": args.seconds, "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
