"""Speaker accuracy as a client sees it: word-level turns of the finals from a real server.

A `parley serve --diarization bundle` runs in its own process; each recording is sent
in real time (100 ms messages paced by the clock) through Parley's own client, which
applies every ``speaker_update`` to the finals it kept. The finals' words, joined into
turns (runs of one speaker's words, split at pauses of 0.3 s or more, as `parley stream
--format rttm` writes them), are scored against the reference with pyannote.metrics:
diarization error rate with a 0.25 s collar and overlap scored, split into confusion,
missed and false alarm (shares of scored speech), and again with overlapped speech left
out (one speaker per word cannot cover it). Also: the number of speakers shown and
whether the labels run S1…Sn in order of first appearance; single-word flips (a word
whose speaker differs from the words on both sides of it in one final); finals holding
more than one speaker; word timing against the reference speech (share of word time
outside speech, share of speech inside no word); final latency; the ``speaker_update``s
received, how many finals they touched, and how many came once all the audio was sent
(the closing relabel's). Where every word said is known, the finals' WER (what the
labels' cuts cost the words).

Recordings: sample.wav (two real speakers), and followed by an espeak-ng dialogue of 3
more voices (60 s, long enough for the closing relabel), espeak-ng dialogues of 2 and 3
voices (and of 3 voices for 60 s, and of 3 voices taking their turns at once), a
single voice with pauses (alone, and with a crowd's murmur or music 12 dB below it,
under the speech and through the pauses: no other speaker, and no words to time), and
clean prompts answered by an old noisy recording.
``realtime`` sends them one at a time; ``load`` sends them all at once, sharing the CPU;
``recording`` sends each whole to the recordings endpoint (Deepgram's pre-recorded wire,
``diarize=true``), as one who has the file would.

Usage: python bench/diarization.py [--modes realtime load] [--server-pythonpath DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from common import CHANGE_TOLERANCE_S, labelled_words, print_table, write_json

import numpy as np
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm
from pyannote.metrics.diarization import DiarizationErrorRate

from audio_fixtures import (
    SAMPLE_WAV,
    crowd_murmur,
    dialogue,
    monologue,
    read_wav,
    recording_and_prompts,
    sample_dir,
    sample_reference_text,
    wer,
    write_wav,
)
from load import Server
from parley.client.stream import ffmpeg_pcm, run_stream, stream_url
from parley.client.transcript import Transcript
from parley.core.audio import SAMPLE_RATE
from parley.protocol.messages import (
    Final,
    FinalReason,
    ServerMessage,
    SessionStarted,
    SpeakerUpdate,
    StreamConfig,
    Word,
)

COLLAR_S = 0.25
GRID_S = 0.01  # timing is scored on a 10 ms grid


BACKGROUND_DB = -12.0  # the background's level against the speech's (RMS)


def background(kind: str, samples: int) -> np.ndarray:
    """A crowd's murmur (several voices at once, low-passed: no words to read) or music
    (chords of harmonics, a new one every 0.45 s), ``samples`` long, unit RMS."""
    if kind == "crowd":
        return crowd_murmur(samples)
    t = np.arange(samples) / SAMPLE_RATE
    note = (t / 0.45).astype(int)
    roots = np.array([220.0, 261.6, 196.0, 293.7])[note % 4]
    envelope = np.exp(-3.0 * (t % 0.45))
    noise = (
        sum(
            np.sin(2 * np.pi * roots * ratio * harmonic * t) / harmonic
            for ratio in (1.0, 1.26, 1.5)
            for harmonic in (1, 2, 3)
        )
        * envelope
    )
    return (noise / max(float(np.sqrt(np.mean(noise**2))), 1e-9)).astype(np.float32)


def over_background(audio: np.ndarray, kind: str) -> np.ndarray:
    """``audio`` with a ``kind`` background BACKGROUND_DB below its speech's level."""
    speech_rms = float(np.sqrt(np.mean(audio[np.abs(audio) > 1e-3] ** 2)))
    level = speech_rms * 10 ** (BACKGROUND_DB / 20)
    return (audio + level * background(kind, len(audio))).astype(np.float32)


def monologue_over(kind: str):
    """The monologue of audio_fixtures over a ``kind`` background; the same turns."""
    audio, truth = monologue()
    return over_background(audio, kind), truth


def corpora(folder: Path, lead_s: float = 0.0) -> dict[str, tuple[Path, Annotation, str]]:
    """name → (wav file, reference annotation, the words said: "" where not all are known),
    each after ``lead_s`` of extra silence (the server's diarization steps fall elsewhere
    in the speech: it shows how much that moves)."""
    sample = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    made = {
        "sample.wav": (
            read_wav(SAMPLE_WAV),
            [(s.start, s.end, label) for s, _, label in sample.itertracks(yield_label=True)],
            sample_reference_text(),
        )
    }
    meeting, meeting_truth = dialogue(["A", "B", "C"], turns=9)
    offset = len(made["sample.wav"][0]) / SAMPLE_RATE
    made["sample.wav + 3 espeak voices"] = (  # long enough for the closing relabel (≥ 30 s)
        np.concatenate([made["sample.wav"][0], meeting]),
        made["sample.wav"][1]
        + [(u.start + offset, u.end + offset, u.voice) for u in meeting_truth],
        " ".join([made["sample.wav"][2], *(u.text for u in meeting_truth)]),
    )
    for name, (audio, truth) in {
        "espeak 3 voices, long": dialogue(["A", "B", "C"], turns=18),
        "espeak 2 voices": dialogue(["A", "B"]),
        "espeak 3 voices": dialogue(["A", "B", "C"]),
        # turns taken at once (0.1 s apart): no pause closes a segment between voices
        "espeak 3 voices, no pauses": dialogue(["A", "B", "C"], turns=12, gap_s=0.1, trim=True),
        "1 voice, pauses": monologue(),
        "1 voice, crowd": monologue_over("crowd"),
        "1 voice, music": monologue_over("music"),
        "prompts + recording": recording_and_prompts(),
    }.items():
        text = " ".join(u.text for u in truth) if all(u.text for u in truth) else ""
        made[name] = (audio, [(u.start, u.end, u.voice) for u in truth], text)
    out = {}
    for name, (audio, truth, text) in made.items():
        reference = Annotation()
        for k, (start, end, label) in enumerate(truth):
            reference[Segment(start + lead_s, end + lead_s), k] = label
        padded = np.concatenate([np.zeros(int(lead_s * SAMPLE_RATE), np.float32), audio])
        path = write_wav(folder / f"{name.replace(' ', '_')}.wav", padded)
        out[name] = (path, reference, text)
    return out


async def stream_file(url: str, path: Path) -> dict:
    """Send one file in real time; the client's transcript and each final's latency."""
    transcript = Transcript()
    latencies: list[float] = []
    change_latencies: list[float] = []
    began: list[float] = []
    updates: list[tuple[float, int]] = []  # (when, after the audio began; which final)

    def on_message(message: ServerMessage) -> None:
        now = time.monotonic()
        if isinstance(message, SessionStarted):
            began.append(now)
        if isinstance(message, Final) and message.reason != FinalReason.END_OF_STREAM:
            latencies.append(now - began[0] - message.end)
            if message.reason == FinalReason.SPEAKER_CHANGE:
                change_latencies.append(latencies[-1])
        if isinstance(message, SpeakerUpdate):
            updates.append((now - began[0], message.segment_id))
        transcript.apply(message)

    sent = [0]  # bytes of audio sent

    async def counted():
        async for chunk in ffmpeg_pcm(str(path)):
            sent[0] += len(chunk)
            yield chunk

    result = await run_stream(url, counted(), 2 * SAMPLE_RATE, on_message=on_message)  # PCM16
    return {
        "transcript": transcript,
        "latencies": latencies,
        "change_latencies": change_latencies,
        "updates": updates,
        "audio_s": sent[0] / (2 * SAMPLE_RATE),
        "errors": result.errors,
    }


def hypothesis(transcript: Transcript) -> Annotation:
    out = Annotation()
    for k, turn in enumerate(transcript.turns()):
        if turn.end > turn.start:
            out[Segment(turn.start, turn.end), k] = turn.speaker or "unlabelled"
    return out


def _grid(segments, length: int) -> np.ndarray:
    mask = np.zeros(length, bool)
    for start, end in segments:
        mask[int(round(start / GRID_S)) : int(round(end / GRID_S))] = True
    return mask


def timing(transcript: Transcript, reference: Annotation) -> dict:
    words = [(w.start, w.end) for f in transcript.finals for w in f.words]
    speech = [(s.start, s.end) for s in reference.get_timeline().support()]
    length = int(max([e for _, e in words + speech] + [0]) / GRID_S) + 2
    in_words, in_speech = _grid(words, length), _grid(speech, length)
    return {
        "words_outside_speech": float((in_words & ~in_speech).sum() / max(in_words.sum(), 1)),
        "speech_outside_words": float((in_speech & ~in_words).sum() / max(in_speech.sum(), 1)),
    }


def flips(transcript: Transcript) -> int:
    count = 0
    for final in transcript.finals:
        labels = [w.speaker for w in final.words]
        count += sum(1 for a, b, c in zip(labels, labels[1:], labels[2:]) if b != a and b != c)
    return count


def true_changes(reference: Annotation) -> list[float]:
    """Where the reference passes from one speaker to another: midway between a turn's
    end and the next turn's start, when their speakers differ."""
    turns = sorted(reference.itertracks(yield_label=True), key=lambda t: t[0].start)
    return [(a.end + b.start) / 2 for (a, _, x), (b, _, y) in zip(turns, turns[1:]) if x != y]


def change_cuts(transcript: Transcript, reference: Annotation) -> dict:
    """The finals cut at a speaker change: how many, the share of them within
    CHANGE_TOLERANCE_S of a true change, and their latency (in ``latency_of``)."""
    changes = true_changes(reference)
    cuts = [f.end for f in transcript.finals if f.reason == FinalReason.SPEAKER_CHANGE]
    right = [c for c in cuts if changes and min(abs(c - t) for t in changes) <= CHANGE_TOLERANCE_S]
    return {
        "speaker_change_finals": len(cuts),
        "change_cuts_right": len(right) / len(cuts) if cuts else None,
    }


def score(name: str, mode: str, outcome: dict, reference: Annotation, text: str) -> dict:
    transcript: Transcript = outcome["transcript"]
    shown = transcript.speakers()
    finals = transcript.finals
    latencies = sorted(outcome["latencies"])
    turns = hypothesis(transcript)
    parts = DiarizationErrorRate(collar=COLLAR_S, skip_overlap=False)(
        reference, turns, detailed=True
    )
    scored = max(parts["total"], 1e-9)
    return {
        "audio": name,
        "mode": mode,
        "der": parts["diarization error rate"],
        "confusion": parts["confusion"] / scored,
        "missed": parts["missed detection"] / scored,
        "false_alarm": parts["false alarm"] / scored,
        "der_no_overlap": DiarizationErrorRate(collar=COLLAR_S, skip_overlap=True)(
            reference, turns
        ),
        "wer": wer(text, " ".join(f.text for f in finals)) if text else None,
        "speakers": len(shown),
        "true_speakers": len(reference.labels()),
        "labels_in_order": shown == [f"S{i + 1}" for i in range(len(shown))],
        "flips": flips(transcript),
        "mixed_finals": sum(1 for f in finals if len({w.speaker for w in f.words}) > 1),
        **change_cuts(transcript, reference),
        "change_latency_max_s": max(outcome["change_latencies"], default=None),
        "change_latencies_s": [round(t, 3) for t in outcome["change_latencies"]],
        "finals": len(finals),
        **timing(transcript, reference),
        "latency_p50_s": statistics.median(latencies) if latencies else None,
        "latency_max_s": latencies[-1] if latencies else None,
        "errors": len(outcome["errors"]),
        # how much the labels a client holds are revised (within the labels' latency, at
        # checkpoint relabels and at the closing one), and how many finals that touches
        "speaker_updates": len(outcome["updates"]),
        "finals_updated": len({segment for _, segment in outcome["updates"]}),
        "updates_after_audio": sum(1 for t, _ in outcome["updates"] if t > outcome["audio_s"]),
        "labels": shown,
        "turns_rttm": turns.to_rttm(),
    }


def recording_of(base: str, path: Path) -> dict:
    """The recording sent whole (Deepgram's pre-recorded wire, ``diarize=true``), its
    words as one final, each labelled S<n> from Deepgram's speaker number."""
    words = [
        Word(w["punctuated_word"], w["start"], w["end"], w["confidence"], f"S{w['speaker'] + 1}")
        for w in labelled_words(base, path)
    ]
    transcript = Transcript()
    if words:
        text = " ".join(w.word for w in words)
        end = words[-1].end
        transcript.apply(
            Final(0, 0.0, end, text, FinalReason.END_OF_STREAM, words, words[0].speaker)
        )
    return {
        "transcript": transcript,
        "latencies": [],
        "change_latencies": [],
        "updates": [],
        "errors": [],
        "audio_s": 0.0,
    }


async def run_mode(url: str, mode: str, files: dict, base: str) -> list[dict]:
    if mode == "realtime":
        outcomes = [await stream_file(url, path) for path, _, _ in files.values()]
    elif mode == "recording":
        outcomes = [recording_of(base, path) for path, _, _ in files.values()]
    else:
        outcomes = await asyncio.gather(*(stream_file(url, p) for p, _, _ in files.values()))
    return [
        score(name, mode, outcome, reference, text)
        for (name, (_, reference, text)), outcome in zip(files.items(), outcomes)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["realtime", "load", "recording"],
        default=["realtime", "load"],
    )
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--only", nargs="+", help="recordings to send (names as in the table)")
    parser.add_argument(
        "--lead-s",
        type=float,
        default=0.0,
        help="silence added before every recording (moves the step grid)",
    )
    parser.add_argument(
        "--server-pythonpath",
        help="run the server from this source tree (e.g. an older checkout, for a before/after)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the server, e.g. PARLEY_DIARIZATION__LATENCY_S=3",
    )
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.server_env)
    if args.server_pythonpath:
        env["PYTHONPATH"] = args.server_pythonpath
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = corpora(Path(tmp), args.lead_s)
        if args.only:
            files = {k: v for k, v in files.items() if k in args.only}
        server = Server(args.model, "bundle", [], "warning", log_name="diarization", env=env)
        try:
            url = stream_url(server.url, StreamConfig(diarization=True), None)
            for mode in args.modes:
                rows += asyncio.run(run_mode(url, mode, files, server.base))
                print(f"{mode}: done", flush=True)
        finally:
            server.stop()
    print()
    print_table(
        rows,
        [
            "audio",
            "mode",
            "der",
            "confusion",
            "missed",
            "false_alarm",
            "der_no_overlap",
            "wer",
            "speakers",
            "true_speakers",
            "labels_in_order",
            "flips",
            "mixed_finals",
            "speaker_change_finals",
            "change_cuts_right",
            "change_latency_max_s",
            "finals",
            "words_outside_speech",
            "speech_outside_words",
            "latency_p50_s",
            "latency_max_s",
            "speaker_updates",
            "finals_updated",
            "updates_after_audio",
            "errors",
        ],
    )
    path = write_json(
        "diarization",
        {
            "label": args.label,
            "model": args.model,
            "lead_s": args.lead_s,
            "server_env": env,
            "rows": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
