"""A generated development set for speaker labelling: many meetings with known turns.

Each recording is drawn from a seed, so the set is the same on every machine:

- **espeak**: 2, 3, 4 or 6 espeak-ng voices (a base voice, a variant, a pitch and a
  speed each, no two alike), taking turns of 1 to 5 sentences with gaps of -0.3 s
  (overlap) to 1.2 s; some turns are a short "Yes." or "Right.";
- **noisy**: the same with noise between and under the speech (white, pink or a
  murmur of other voices) and the level of each turn changed by up to ±9 dB;
- **phone**: the same through an 8 kHz mu-law line and back;
- **real**: the real voices that registry packages carry (sample.wav's two speakers,
  from pyannote.audio's wheel, cut at its reference turns), alone and mixed with
  espeak-ng voices;
- **one voice**: a single voice with pauses, noise in some, which must stay one speaker;
- **recorded**: meetings of real people's recorded voices (``recorded_voices.py``:
  KTuberling's volunteers in ``dev``, Asterisk's studio prompts in ``heldout``), one to
  six of them, noise and level changes in half.

Two splits with no voice recipe, sentence or seed in common: ``dev`` (what the
clustering may be tuned on) and ``heldout`` (never tuned on: reported on its own).

Usage: python bench/devset.py [--split dev] [--out DIR]  (writes WAV + RTTM per recording)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import common  # noqa: F401 (puts the test fixtures on the path)

import numpy as np

import recorded_voices
from audio_fixtures import SAMPLE_WAV, read_wav, sample_dir, write_wav

SAMPLE_RATE = 16000
CACHE = Path(__file__).resolve().parent / "results" / "devset-cache"

# Base voices and variants, split so that held-out meetings use voices never tuned on.
BASES = {
    "dev": ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "de", "fr"],
    "heldout": ["en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc", "es", "it", "nl"],
}
VARIANTS = {
    "dev": [
        "m1",
        "m2",
        "m3",
        "m4",
        "f1",
        "f2",
        "f3",
        "klatt",
        "klatt3",
        "Andy",
        "Annie",
        "edward",
        "max",
        "linda",
        "john",
    ],
    "heldout": [
        "m5",
        "m6",
        "m7",
        "f4",
        "f5",
        "klatt2",
        "klatt4",
        "adam",
        "anika",
        "benjamin",
        "david",
        "grandma",
        "paul",
        "belinda",
    ],
}
SENTENCES = {
    "dev": [
        "I think we should move the launch to the second week of June.",
        "Can you share the numbers from the last quarter before Friday?",
        "The new design looks cleaner, but the buttons are too small.",
        "We lost two customers in March because support was too slow.",
        "Let me check with the legal team and come back to you.",
        "Honestly, I am not sure the budget covers a second office.",
        "The servers were down for almost an hour on Tuesday night.",
        "If we hire in January, the team is ready by the spring.",
        "My main worry is the test coverage of the payment code.",
        "We tried that last year and the results were disappointing.",
        "The workshop in Berlin was full, so we added a second date.",
        "Please send the contract to me, and I will sign it today.",
        "The training data has far more questions than answers.",
        "Our competitors cut their prices by twenty percent last month.",
        "I would rather ship a smaller version that actually works.",
        "The survey shows that most people use the mobile app at night.",
        "We need a plan for the migration before anyone touches the database.",
        "That sounds reasonable, as long as the deadline does not slip.",
        "Who is going to present the results at the board meeting?",
        "The printer on the third floor has been broken since Monday.",
    ],
    "heldout": [
        "The harbour was quiet when the fishing boats came back at dawn.",
        "She planted tomatoes, beans and a row of sunflowers by the fence.",
        "Our train stopped twice because of leaves on the line.",
        "The museum opens late on Thursdays, until nine in the evening.",
        "He repaired the old clock with parts from a flea market.",
        "Nobody expected the storm to reach the coast so quickly.",
        "The recipe needs two eggs, a cup of flour and some butter.",
        "They walked along the river until the path turned to mud.",
        "The library has a new section for comics and graphic novels.",
        "Every summer the village holds a festival with music and food.",
        "My neighbour keeps bees, and the honey tastes of lavender.",
        "The mountain hut was warm, although the wind howled all night.",
        "A small bakery on the corner sells bread until it runs out.",
        "The children built a raft and floated it across the pond.",
        "We watched the eclipse through a piece of smoked glass.",
        "The orchestra played the symphony without a single pause.",
        "After the rain, the garden smelled of earth and cut grass.",
        "The old bridge will be closed for repairs until October.",
        "He learned to sail on a lake in the north of Sweden.",
        "The hotel served breakfast on a terrace above the sea.",
    ],
}
SHORT_TURNS = ["Yes.", "Right.", "Okay, sure.", "No.", "Exactly.", "Mm, I see."]
# recordings per split: (kind, speakers) → how many
PLAN = {
    "dev": {
        ("espeak", 2): 4,
        ("espeak", 3): 4,
        ("espeak", 4): 4,
        ("espeak", 6): 3,
        ("noisy", 2): 3,
        ("noisy", 3): 3,
        ("noisy", 4): 3,
        ("noisy", 6): 2,
        ("phone", 2): 3,
        ("phone", 3): 3,
        ("phone", 4): 3,
        ("phone", 6): 2,
        ("real", 2): 3,
        ("real", 3): 3,
        ("real", 4): 3,
        ("one voice", 1): 4,
        ("recorded", 1): 3,
        ("recorded", 2): 5,
        ("recorded", 3): 5,
        ("recorded", 4): 5,
        ("recorded", 6): 4,
    },
    "heldout": {
        ("espeak", 2): 2,
        ("espeak", 3): 2,
        ("espeak", 4): 2,
        ("espeak", 6): 2,
        ("noisy", 2): 2,
        ("noisy", 3): 2,
        ("noisy", 4): 2,
        ("noisy", 6): 1,
        ("phone", 2): 2,
        ("phone", 3): 2,
        ("phone", 4): 2,
        ("phone", 6): 1,
        ("real", 2): 2,
        ("real", 3): 2,
        ("real", 4): 2,
        ("one voice", 1): 3,
        ("recorded", 1): 2,
        ("recorded", 2): 3,
        ("recorded", 3): 3,
        ("recorded", 4): 4,
        ("recorded", 6): 2,
    },
}
SPLIT_SEED = {"dev": 1000, "heldout": 9000}


@dataclass(frozen=True)
class Voice:
    name: str  # espeak-ng voice (base+variant), or "real:<speaker>"
    pitch: int = 50
    speed: int = 160


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


@dataclass
class Recording:
    name: str
    split: str
    kind: str
    speakers: int
    audio: np.ndarray
    turns: list[Turn]
    text: list[str]

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    def rttm(self) -> str:
        return "".join(
            f"SPEAKER {self.name} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> "
            f"{t.speaker} <NA> <NA>\n"
            for t in self.turns
        )


def _speak(text: str, voice: Voice) -> np.ndarray:
    """espeak-ng speech at 16 kHz (cached on disk: the set is regenerated often)."""
    key = hashlib.sha1(json.dumps([text, asdict(voice)]).encode()).hexdigest()[:16]
    path = CACHE / f"{key}.wav"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw.wav"
            subprocess.run(
                [
                    "espeak-ng",
                    "-v",
                    voice.name,
                    "-p",
                    str(voice.pitch),
                    "-s",
                    str(voice.speed),
                    "-w",
                    str(raw),
                    text,
                ],
                check=True,
                capture_output=True,
            )
            subprocess.run(  # "-R": the same dither every run (tests/audio_fixtures.py)
                ["sox", "-R", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(path)],
                check=True,
                capture_output=True,
            )
    return _trim(read_wav(path))


def _trim(audio: np.ndarray, floor: float = 0.01) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > floor)
    return audio[loud[0] : loud[-1] + 1] if len(loud) else audio[:0]


def _real_voices() -> dict[str, list[np.ndarray]]:
    """sample.wav's speakers: each one's turns where nobody else speaks, at least 0.8 s."""
    from pyannote.database.util import load_rttm

    audio = read_wav(SAMPLE_WAV)
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    overlap = reference.get_overlap()
    clips: dict[str, list[np.ndarray]] = {}
    for segment, _, label in reference.itertracks(yield_label=True):
        for part in reference.get_timeline().support().crop(segment).extrude(overlap).support():
            if part.duration >= 0.8:
                clip = audio[int(part.start * SAMPLE_RATE) : int(part.end * SAMPLE_RATE)]
                clips.setdefault(label, []).append(_trim(clip, 0.005))
    return clips


def _voices(rng: np.random.Generator, split: str, count: int) -> list[Voice]:
    """``count`` espeak voices, no two with the same base and variant, pitches apart."""
    chosen: list[Voice] = []
    while len(chosen) < count:
        base, variant = rng.choice(BASES[split]), rng.choice(VARIANTS[split])
        voice = Voice(f"{base}+{variant}", int(rng.integers(20, 91)), int(rng.integers(135, 186)))
        if any(
            v.name == voice.name
            or (v.name.split("+")[1] == variant and abs(v.pitch - voice.pitch) < 25)
            for v in chosen
        ):
            continue
        chosen.append(voice)
    return chosen


def _noise(
    rng: np.random.Generator, samples: int, kind: str, level: float, murmur: np.ndarray | None
) -> np.ndarray:
    if kind == "white":
        noise = rng.standard_normal(samples)
    elif kind == "pink":
        spectrum = np.fft.rfft(rng.standard_normal(samples))
        spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1))
        noise = np.fft.irfft(spectrum, samples)
    else:  # a murmur: far-off voices, no words to read
        noise = np.resize(murmur, samples) if murmur is not None else rng.standard_normal(samples)
    noise = noise / max(np.sqrt(np.mean(noise**2)), 1e-9)
    return (noise * level).astype(np.float32)


def _phone(audio: np.ndarray) -> np.ndarray:
    """Through an 8 kHz mu-law line and back to 16 kHz, as a phone call arrives."""
    import audioop

    import soxr

    narrow = soxr.resample(audio, SAMPLE_RATE, 8000)
    pcm = (np.clip(narrow, -1, 1) * 32767).astype("<i2").tobytes()
    decoded = audioop.ulaw2lin(audioop.lin2ulaw(pcm, 2), 2)
    back = np.frombuffer(decoded, "<i2").astype(np.float32) / 32768
    return soxr.resample(back, 8000, SAMPLE_RATE).astype(np.float32)


def make(split: str, kind: str, speakers: int, index: int) -> Recording:
    """One recording of the set (the same for the same arguments, on any machine)."""
    seed = SPLIT_SEED[split] + hash_of(kind, speakers, index)
    rng = np.random.default_rng(seed)
    sentences = SENTENCES[split]
    real = _real_voices() if kind == "real" else {}
    voices: list[Voice] = []
    people = {}
    if kind == "real":
        voices = [Voice(f"real:{name}") for name in sorted(real)][:speakers]
    elif kind == "recorded":
        people = _recorded(rng, split, speakers)
        voices = [Voice(f"recorded:{name}") for name in people]
    voices += _voices(rng, split, speakers - len(voices))
    turns_wanted = int(rng.integers(max(6, 3 * speakers), 4 * speakers + 6))
    cursor = int(rng.uniform(0.3, 1.5) * SAMPLE_RATE)  # lead silence
    spans: list[tuple[int, int, str]] = []
    speeches: list[np.ndarray] = []
    heard: list[list[tuple[int, int]]] = []  # each turn's stretches of speech, within it
    text: list[str] = []
    previous = -1
    for k in range(turns_wanted):
        # Everyone speaks in the first round (so each voice is heard), then at random.
        who = (
            k
            if k < speakers
            else int(rng.choice([i for i in range(speakers) if i != previous or speakers == 1]))
        )
        previous = who
        voice = voices[who]
        if voice.name.startswith("real:"):
            clips = real[voice.name[5:]]
            speech = clips[int(rng.integers(len(clips)))]
            said = ""
        elif voice.name.startswith("recorded:"):
            short = k >= speakers and rng.random() < 0.15
            speech, stretches = recorded_voices.turn(people[voice.name[9:]], rng, short)
            said = ""
        else:
            short = k >= speakers and rng.random() < 0.15
            lines = (
                [str(rng.choice(SHORT_TURNS))]
                if short
                else [str(rng.choice(sentences)) for _ in range(int(rng.integers(1, 3)))]
            )
            said = " ".join(lines)
            speech = np.concatenate([_speak(line, voice) for line in lines])
        if kind == "noisy" or (kind == "recorded" and index % 2):
            speech = speech * float(10 ** (rng.uniform(-9, 9) / 20))
        gap = float(rng.uniform(-0.3, 1.2)) if k else 0.0
        if gap < 0 and len(speech) > SAMPLE_RATE:  # overlap: start under the last turn
            cursor -= min(int(-gap * SAMPLE_RATE), (spans[-1][1] - spans[-1][0]) // 2)
        else:
            cursor += int(max(gap, 0.0) * SAMPLE_RATE)
        spans.append((cursor, cursor + len(speech), voice.name))
        speeches.append(speech)
        heard.append(stretches if voice.name.startswith("recorded:") else [(0, len(speech))])
        cursor += len(speech)
        text.append(said)
    length = max(end for _, end, _ in spans) + int(rng.uniform(0.5, 1.5) * SAMPLE_RATE)
    audio = np.zeros(length, np.float32)
    for (start, end, _), speech in zip(spans, speeches):
        audio[start:end] += speech
    if kind == "noisy" or (kind in ("one voice", "recorded") and rng.random() < 0.5):
        murmur = _murmur(rng, split) if rng.random() < 0.4 else None
        level = float(np.sqrt(np.mean(audio[audio != 0] ** 2)) * 10 ** (-rng.uniform(12, 25) / 20))
        audio += _noise(rng, length, str(rng.choice(["white", "pink", "murmur"])), level, murmur)
    if kind == "phone":
        audio = _phone(audio)[:length]
    peak = float(np.abs(audio).max())
    if peak > 0.99:
        audio *= 0.99 / peak
    names = {v.name: f"spk{i}" for i, v in enumerate(voices)}
    # A turn of separately recorded words is as many turns as words: the pauses between
    # them are silence, as a reference annotation would mark them.
    turns = [
        Turn((s + a) / SAMPLE_RATE, (s + b) / SAMPLE_RATE, names[v])
        for (s, _, v), stretches in zip(spans, heard)
        for a, b in stretches
    ]
    return Recording(
        f"{split}-{kind.replace(' ', '_')}-{speakers}-{index}",
        split,
        kind,
        speakers,
        audio,
        turns,
        text,
    )


def _recorded(
    rng: np.random.Generator, split: str, count: int
) -> dict[str, recorded_voices.RecordedVoice]:
    """``count`` different real people of ``split``, by name."""
    people = recorded_voices.available(split)
    if len(people) < count:
        raise SystemExit(
            f"{count} recorded voices wanted, {len(people)} installed: see bench/recorded_voices.py"
        )
    chosen = rng.choice(len(people), size=count, replace=False)
    return {people[int(i)].name: people[int(i)] for i in chosen}


def _murmur(rng: np.random.Generator, split: str) -> np.ndarray:
    """Several voices at once, low-passed: a room's murmur without words to read."""
    voices = _voices(rng, split, 4)
    speech = [_speak(str(rng.choice(SENTENCES[split])), v) for v in voices]
    length = max(len(s) for s in speech)
    mix = sum(np.pad(s, (0, length - len(s))) for s in speech)
    kernel = np.ones(8) / 8
    return np.convolve(mix, kernel, mode="same").astype(np.float32)


def hash_of(kind: str, speakers: int, index: int) -> int:
    return int(hashlib.sha1(f"{kind}/{speakers}/{index}".encode()).hexdigest()[:6], 16)


def recordings(split: str) -> list[Recording]:
    """Every recording of ``split``, in a fixed order."""
    return [
        make(split, kind, speakers, i)
        for (kind, speakers), count in PLAN[split].items()
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=sorted(PLAN), default="dev")
    parser.add_argument("--out", type=Path, default=Path("devset"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for recording in recordings(args.split):
        write_wav(args.out / f"{recording.name}.wav", recording.audio)
        (args.out / f"{recording.name}.rttm").write_text(recording.rttm())
        print(f"{recording.name}: {recording.duration:.1f} s, {len(recording.turns)} turns")


if __name__ == "__main__":
    main()
