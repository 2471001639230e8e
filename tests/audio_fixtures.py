"""Test audio: pyannote's sample with its references, and espeak-ng speech with known text."""

from __future__ import annotations

import re
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


def sample_dir() -> Path:
    # Found, not imported: importing pyannote.audio (torch, lightning, its pipelines)
    # costs every test worker about 9 s of CPU, though most never diarize.
    spec = find_spec("pyannote.audio")
    assert spec is not None and spec.submodule_search_locations, "pyannote.audio is missing"
    return Path(spec.submodule_search_locations[0]) / "sample"


SAMPLE_WAV = sample_dir() / "sample.wav"


def read_wav(path: Path) -> np.ndarray:
    """16 kHz mono PCM16 WAV → float32 (the test files are all of that kind)."""
    with wave.open(str(path)) as w:
        assert w.getframerate() == SAMPLE_RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768


def write_wav(path: Path, audio: np.ndarray) -> Path:
    """16 kHz PCM16: mono, or (channels, samples) interleaved."""
    channels = audio.reshape(-1, audio.shape[-1])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(len(channels))
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes((np.clip(channels.T, -1, 1) * 32767).astype("<i2").tobytes())
    return path


# Synthetic speakers for diarization: espeak-ng voices (and pitches) whose CAM++
# embeddings are far apart (cosine distance 0.48 to 0.62 between them).
SPEAKERS = {"A": "en-us+klatt:50", "B": "en+f5:90", "C": "en-gb-scotland+m7:20"}
# Two voices tiny.en reads well that the speaker models still tell apart: the dialogue's
# first four lines score WER 0.04 in them, 0.27 in SPEAKERS' A and B (measured here).
PLAIN_VOICES = ("en-us", "en-us+f3")


def speak(text: str, voice: str = "en-us") -> np.ndarray:
    """espeak-ng speech resampled by sox to 16 kHz mono float32 (voice: "name[:pitch]")."""
    name, _, pitch = voice.partition(":")
    with tempfile.TemporaryDirectory() as tmp:
        raw, out = Path(tmp) / "raw.wav", Path(tmp) / "out.wav"
        subprocess.run(
            ["espeak-ng", "-v", name, "-p", pitch or "50", "-s", "150", "-w", str(raw), text],
            check=True,
        )
        # sox dithers what it writes in 16 bits from a new seed each run; "-R" seeds it
        # the same every time, so that a test or benchmark hears the same audio each run.
        subprocess.run(
            ["sox", "-R", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(out)],
            check=True,
        )
        return read_wav(out)


def audible_span(speech: np.ndarray, floor: float = 0.01) -> tuple[float, float]:
    """Seconds from the start of ``speech`` to its first and last sample above ``floor``
    (espeak-ng pads its output with about 0.4 s of silence, which is not speech)."""
    loud = np.flatnonzero(np.abs(speech) > floor)
    if not len(loud):
        return 0.0, 0.0
    return loud[0] / SAMPLE_RATE, (loud[-1] + 1) / SAMPLE_RATE


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32)


@dataclass(frozen=True)
class Utterance:
    text: str
    start: float
    end: float
    voice: str = ""


# A crowd far off: four voices, two of them in other languages, at once.
CROWD = (
    ("Where did you park the car this morning?", "de+m3"),
    ("The soup was cold but the bread was fresh.", "fr+f2"),
    ("We should leave before the traffic starts.", "en-gb+m1"),
    ("Has anyone seen the keys to the office?", "en-us+f3"),
)


def crowd_murmur(samples: int) -> np.ndarray:
    """A crowd's murmur ``samples`` long at unit RMS: the ``CROWD`` voices at once,
    low-passed (no words to read), repeated."""
    voices = [speak(text, voice) for text, voice in CROWD]
    length = max(len(v) for v in voices)
    mix = sum(np.pad(v, (0, length - len(v))) for v in voices)
    noise = np.resize(np.convolve(mix, np.ones(8) / 8, mode="same"), samples)
    return (noise / max(float(np.sqrt(np.mean(noise**2))), 1e-9)).astype(np.float32)


def at_level(audio: np.ndarray, dbfs: float) -> np.ndarray:
    """``audio`` scaled to an RMS of ``dbfs``."""
    rms = max(float(np.sqrt(np.mean(audio**2))), 1e-9)
    return (audio / rms * 10 ** (dbfs / 20)).astype(np.float32)


def conversation(
    lines: list[tuple[str, str]], gap_s: float = 1.0, lead_s: float = 0.5, trim: bool = False
) -> tuple[np.ndarray, list[Utterance]]:
    """(voice, text) turns separated by ``gap_s`` of silence; returns audio and the truth.
    ``trim``: each turn without espeak-ng's own silence around it (turns taken at once)."""
    parts = [silence(lead_s)]
    truth = []
    t = lead_s
    for voice, text in lines:
        speech = speak(text, voice)
        first, last = audible_span(speech)
        if trim:
            speech = speech[int(first * SAMPLE_RATE) : int(last * SAMPLE_RATE)]
            first, last = 0.0, len(speech) / SAMPLE_RATE
        truth.append(Utterance(text, t + first, t + last, voice))
        parts += [speech, silence(gap_s)]
        t += len(speech) / SAMPLE_RATE + gap_s
    return np.concatenate(parts), truth


DIALOGUE_LINES = [
    "Good morning, did you get the report I sent yesterday?",
    "Yes, I read it last night and I have a few questions about the budget.",
    "Of course. Which part of the budget worries you the most?",
    "The travel costs look much higher than last year.",
    "That is because the team will visit three new customers this spring.",
    "I see. Then we should plan those trips together next week.",
    "Agreed. I will send you a proposal on Monday morning.",
    "Thank you. Let us talk again after you send it.",
]


def sample_turns() -> list[Utterance]:
    """sample.stm's turns, in order: what each speaker said, and when."""
    lines = (sample_dir() / "sample.stm").read_text().splitlines()
    fields = [line.split(None, 5) for line in lines if line.strip()]
    return [
        Utterance(text, float(start), float(end), who) for _, _, who, start, end, text in fields
    ]


def sample_reference_text() -> str:
    """The words of sample.stm, in order."""
    return " ".join(turn.text for turn in sample_turns())


def dialogue(speakers: list[str], turns: int = 8, gap_s: float = 0.6, trim: bool = False):
    """A conversation that cycles through ``speakers`` (keys of SPEAKERS)."""
    lines = [
        (SPEAKERS[speakers[i % len(speakers)]], DIALOGUE_LINES[i % len(DIALOGUE_LINES)])
        for i in range(turns)
    ]
    return conversation(lines, gap_s=gap_s, trim=trim)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after Whisper's English normaliser (numbers, spelling, punctuation)."""
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    normalize = EnglishTextNormalizer({})
    return jiwer.wer(normalize(reference), normalize(hypothesis))


def words_of(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


MONOLOGUE_LINES = [
    "Thank you all for coming today.",
    "I will keep this short.",
    "First, the new office opens in March.",
    "Second, we are hiring two more engineers.",
    "Finally, please send me your questions by Friday.",
]
MONOLOGUE_PAUSES_S = [0.6, 1.5, 0.9, 2.2]


def monologue(voice: str = "A") -> tuple[np.ndarray, list[Utterance]]:
    """One speaker, five sentences, pauses of 0.6 to 2.2 s between them."""
    parts, truth, t = [silence(0.5)], [], 0.5
    for line, pause in zip(MONOLOGUE_LINES, MONOLOGUE_PAUSES_S + [1.0]):
        speech = speak(line, SPEAKERS[voice])
        first, last = audible_span(speech)
        truth.append(Utterance(line, t + first, t + last, SPEAKERS[voice]))
        parts += [speech, silence(pause)]
        t += len(speech) / SAMPLE_RATE + pause
    return np.concatenate(parts), truth


# A meeting's talk: two voices taking turns, a sentence each, long pauses between.
TALK_LINES = [
    "Thank you all for coming today.",
    "I will keep this short.",
    "First, the new office opens in March.",
    "Second, the budget review moves to Friday.",
    "Please send your questions to the team by email.",
    "We looked at three options for the new building.",
    "The second one costs less but takes longer to finish.",
    "Let us meet again next week to decide.",
]


def talk_over_far_crowd(
    lines: int, crowd_db: float = -20.0, pause_s: float = 4.0
) -> tuple[np.ndarray, list[Utterance]]:
    """The first ``lines`` of ``TALK_LINES`` in ``PLAIN_VOICES`` by turns, ``pause_s``
    apart, and a crowd's murmur throughout ``crowd_db`` under the talk's speech (RMS of
    its samples above 0.01), as a far-off crowd fills a meeting's pauses."""
    parts, truth, t = [silence(1.0)], [], 1.0
    for k, line in enumerate(TALK_LINES[:lines]):
        speech = speak(line, PLAIN_VOICES[k % 2])
        first, last = audible_span(speech)
        truth.append(Utterance(line, t + first, t + last, PLAIN_VOICES[k % 2]))
        parts += [speech, silence(pause_s)]
        t += len(speech) / SAMPLE_RATE + pause_s
    talk = np.concatenate(parts)
    speech_dbfs = 10 * np.log10(np.mean(talk[np.abs(talk) > 0.01] ** 2))
    return talk + at_level(crowd_murmur(len(talk)), speech_dbfs + crowd_db), truth


# Stretches of sample.wav where only its first speaker (speaker90) talks, per sample.rttm.
SAMPLE_SPEAKER90_ALONE_S = [(11.05, 14.45), (18.62, 21.45), (8.35, 9.9)]


def recording_and_prompts(rounds: int = 6, gap_s: float = 0.6):
    """Two speakers: clean espeak-ng prompts (voice A) answered by an old, noisy recording
    (sample.wav's first speaker), turn by turn."""
    recording = read_wav(SAMPLE_WAV)
    parts, truth, t = [silence(0.5)], [], 0.5
    for k in range(rounds):
        prompt = speak(DIALOGUE_LINES[k % len(DIALOGUE_LINES)], SPEAKERS["A"])
        start, end = SAMPLE_SPEAKER90_ALONE_S[k % len(SAMPLE_SPEAKER90_ALONE_S)]
        answer = recording[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]
        for audio, who in ((prompt, SPEAKERS["A"]), (answer, "speaker90")):
            first, last = (
                audible_span(audio) if who == SPEAKERS["A"] else (0.0, len(audio) / SAMPLE_RATE)
            )
            truth.append(Utterance("", t + first, t + last, who))
            parts += [audio, silence(gap_s)]
            t += len(audio) / SAMPLE_RATE + gap_s
    return np.concatenate(parts), truth


def der(reference, hypothesis) -> float:
    """Diarization error rate as every speaker test scores it: a 0.25 s collar, overlap
    scored (pyannote.metrics)."""
    from pyannote.metrics.diarization import DiarizationErrorRate

    return DiarizationErrorRate(collar=0.25, skip_overlap=False)(reference, hypothesis)


def word_turns(words: list[dict], key: str = "speaker"):
    """Who spoke when, from words' times and speakers (what a client of the file API
    has), as a pyannote Annotation."""
    from pyannote.core import Annotation, Segment

    hypothesis = Annotation()
    for k, w in enumerate(words):
        if w.get(key) is not None and w["end"] > w["start"]:
            hypothesis[Segment(w["start"], w["end"]), k] = str(w[key])
    return hypothesis.support(collar=0.5)
