"""Word times against the synthesiser's own: how early or late each system places words.

Dialogues of two of Festival's English voices (an HTS voice of one speaker, a diphone
voice of another; bench/festival_voices.py) take turns of one or two sentences with
gaps of -0.15 to 0.25 s,
so that most turns pass with no pause the VAD would end a segment at and a word's time
comes from the aligner, not from the edge of a voiced region. Festival reports where it
placed each word. Parley's words come from a server (``parley serve --diarization
bundle``): a live stream with speaker labels sent in real time (every
``speaker_update`` applied, as a client keeps them), and the recordings endpoint
(Deepgram's pre-recorded ``/v1/listen?diarize=true``: words with speakers).
faster-whisper's ``WhisperModel(word_timestamps=True)`` on the CTranslate2 files the
bundle is built from places the same model's words the way openai/whisper does, as a
reference. Words are matched by their text; for each: start and end error (seconds,
later positive), the middle's, the share of words whose middle is within 0.2 s of the
truth, and the share labelled with their own voice (labels mapped to voices by the
best one-to-one match).

Usage: python bench/word_times.py [--dialogues 8] [--server-pythonpath DIR]
Needs Festival's voices: ``apt-get install festival festvox-us-slt-hts festvox-kallpc16k``.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import random
import re
import statistics
import tempfile
from pathlib import Path

from common import labelled_words, print_table, write_json

import numpy as np
from scipy.optimize import linear_sum_assignment

from audio_fixtures import DIALOGUE_LINES, write_wav
from devset import SENTENCES
from festival_voices import KEYTERM_VOICES, installed, speak_timed
from load import Server
from parley.client.stream import run_stream, stream_url
from parley.client.transcript import Transcript
from parley.core.audio import SAMPLE_RATE
from parley.protocol.messages import StreamConfig

Labelled = tuple[str, float, float, str | None]  # a word, its start and end (s), its speaker


def dialogue(seed: int, turns: int = 6) -> tuple[np.ndarray, list[Labelled]]:
    """Two voices taking ``turns`` turns of one or two sentences: the audio, and every
    word where Festival placed it, with its voice ("0" or "1")."""
    rng = random.Random(seed)
    lines = SENTENCES["dev"] + SENTENCES["heldout"] + DIALOGUE_LINES
    parts, cursor = [], 0.5
    truth: list[Labelled] = []
    for turn in range(turns):
        # one sentence or two: a voice's own pause between sentences, inside its turn
        said = " ".join(rng.sample(lines, rng.choice((1, 2))))
        audio, words = speak_timed(said, KEYTERM_VOICES[turn % 2])
        at = max(0.0, cursor - words[0][1])  # the turn's first word begins at the cursor
        parts.append((at, audio * (0.8 if turn % 2 else 1.0)))
        truth += [(word, at + start, at + end, str(turn % 2)) for word, start, end in words]
        cursor = at + words[-1][2] + rng.uniform(-0.15, 0.25)
    mix = np.zeros(int((truth[-1][2] + 1.0) * SAMPLE_RATE) + SAMPLE_RATE, np.float32)
    for at, audio in parts:
        i = int(at * SAMPLE_RATE)
        mix[i : i + len(audio)] += audio[: len(mix) - i]
    return np.clip(mix, -1, 1), truth


# start, end error; voice, label; whether the word is followed by a pause
Matched = tuple[float, float, str | None, str | None, bool]
PAUSE_S = 0.1  # a word followed by this much silence (or by none) ends before a pause


def matched(truth: list[Labelled], words: list[Labelled]) -> list[Matched]:
    """Each word matched by its text, in order: its errors, its voice and its label, and
    whether a pause follows it."""

    def key(word: str) -> str:
        return re.sub(r"[^a-z0-9']", "", word.lower())

    matcher = difflib.SequenceMatcher(
        a=[key(w[0]) for w in truth], b=[key(w[0]) for w in words], autojunk=False
    )
    follows = [later[1] for later in truth[1:]] + [float("inf")]
    return [
        (words[b + k][1] - truth[a + k][1], words[b + k][2] - truth[a + k][2])
        + (truth[a + k][3], words[b + k][3], follows[a + k] - truth[a + k][2] >= PAUSE_S)
        for a, b, size in matcher.get_matching_blocks()
        for k in range(size)
    ]


def labelled_right(found: list[Matched]) -> int:
    """Words whose label is their voice's, labels mapped to voices one to one so that
    most words are right."""
    voices = sorted({str(v) for _, _, v, _, _ in found})
    labels = sorted({str(label) for _, _, _, label, _ in found})
    counts = np.zeros((len(voices), len(labels)))
    for _, _, voice, label, _ in found:
        counts[voices.index(str(voice)), labels.index(str(label))] += 1
    rows, cols = linear_sum_assignment(-counts)
    return int(counts[rows, cols].sum())


async def live(url: str, audio: np.ndarray) -> list[Labelled]:
    """The words of a labelled stream sent in real time, as a client keeps them."""
    pcm = (audio * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), 3200):
            yield pcm[i : i + 3200]

    transcript = Transcript()
    await run_stream(url, chunks(), 2 * SAMPLE_RATE, on_message=transcript.apply)
    return [(w.word, w.start, w.end, w.speaker) for f in transcript.finals for w in f.words]


def recording(base: str, path: Path) -> list[Labelled]:
    """The words of the recording sent whole (Deepgram's pre-recorded wire)."""
    return [
        (w["punctuated_word"], w["start"], w["end"], str(w["speaker"]))
        for w in labelled_words(base, path)
    ]


def faster_whisper(model: str, paths: list[Path]) -> list[list[Labelled]]:
    from faster_whisper import WhisperModel

    from parley.weights.bundle import ct2_source

    ct2 = ct2_source(model, Path(tempfile.gettempdir()) / f"parley-ct2-{model}")
    whisper = WhisperModel(str(ct2), device="cpu", compute_type="float32", cpu_threads=2)
    out: list[list[Labelled]] = []
    for path in paths:
        segments, _ = whisper.transcribe(
            str(path), word_timestamps=True, beam_size=1, condition_on_previous_text=False
        )
        out.append([(w.word.strip(), w.start, w.end, None) for s in segments for w in s.words])
    return out


def row(system: str, found: list[Matched], said: int) -> dict:
    starts = sorted(s for s, _, _, _, _ in found)
    middles = [(s + e) / 2 for s, e, _, _, _ in found]
    paused = [e for _, e, _, _, pause in found if pause]

    def pct(values: list[float], p: float) -> float:
        return values[int(p * (len(values) - 1))]

    return {
        "system": system,
        "words": f"{len(found)} of {said}",
        "start p10": pct(starts, 0.1),
        "start p50": pct(starts, 0.5),
        "start p90": pct(starts, 0.9),
        "end p50": statistics.median(e for _, e, _, _, _ in found),
        "before a pause: words": len(paused),
        "before a pause: end p50": statistics.median(paused),
        "before a pause: end within 0.2 s": sum(abs(e) <= 0.2 for e in paused) / len(paused),
        "middle p50": statistics.median(middles),
        "middle within 0.2 s": sum(abs(m) <= 0.2 for m in middles) / len(middles),
        "own voice": (labelled_right(found) / len(found) if any(f[3] for f in found) else None),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dialogues", type=int, default=8)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--server-pythonpath", help="the server from this source tree")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if not installed():
        raise SystemExit("Festival is not installed (see this script's docstring)")
    env = {"PYTHONPATH": args.server_pythonpath} if args.server_pythonpath else {}
    found: dict[str, list[Matched]] = {"live": [], "recording": [], "fw": []}
    with tempfile.TemporaryDirectory() as tmp:
        dialogues = [dialogue(seed) for seed in range(args.dialogues)]
        paths = [Path(tmp) / f"dialogue-{i}.wav" for i in range(len(dialogues))]
        for path, (audio, _) in zip(paths, dialogues, strict=True):
            write_wav(path, audio)
        server = Server(args.model, "bundle", [], "warning", log_name="word-times", env=env)
        try:
            url = stream_url(server.url, StreamConfig(diarization=True), None)
            for path, (audio, truth) in zip(paths, dialogues, strict=True):
                found["live"] += matched(truth, await live(url, audio))
                found["recording"] += matched(truth, recording(server.base, path))
        finally:
            server.stop()
        for (_, truth), words in zip(dialogues, faster_whisper(args.model, paths), strict=True):
            found["fw"] += matched(truth, words)
    said = sum(len(truth) for _, truth in dialogues)
    names = {
        "live": f"Parley{args.label}, live stream (labelled, real time)",
        "recording": f"Parley{args.label}, recording (labelled)",
        "fw": "faster-whisper word_timestamps",
    }
    rows = [row(names[k], v, said) for k, v in found.items()]
    print_table(rows, list(rows[0]))
    print(f"JSON: {write_json('word_times', {'args': vars(args), 'rows': rows})}")


if __name__ == "__main__":
    asyncio.run(main())
