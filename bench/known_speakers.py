"""Known speakers' names on real voices: OpenAI's ``known_speaker_names[]`` and
``known_speaker_references[]``, as the file pipeline applies them.

Each recorded meeting of bench/devset.py (real people: KTuberling's volunteers in
``dev``, Asterisk's speakers in ``heldout``) is diarized as a recording is
(``SpeakerModels.diarize_recording``); each person in it is given a reference clip of
their own voice (other recordings of theirs, 2 to 10 s), and one person of the split
who is not in it a reference too. Each of the recording's voices is then named as the
server names it (``core.speaker_names``), at several similarity bars. Scored per name:

- right: the name landed on the voice whose turns are mostly that person's;
- wrong: it landed on another person's voice;
- missed: a present person's name landed nowhere;
- absent named: the absent person's name landed on a voice.

Usage: python bench/known_speakers.py [--split dev heldout] [--bars 0.5 0.6 0.7]
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import replace

from common import print_table, write_json

import numpy as np

import recorded_voices
from devset import PLAN, SAMPLE_RATE, SPLIT_SEED, Recording, _recorded, hash_of, make
from parley.core.speaker_names import REFERENCE_SECONDS, named_voices, voice_audio


def reference(voice: recorded_voices.RecordedVoice, rng: np.random.Generator) -> np.ndarray:
    """Clips of one person, in a random order, end to end up to 2 to 10 s."""
    paths = recorded_voices.clips(voice)
    low, high = REFERENCE_SECONDS
    pieces, total = [], 0
    for i in rng.permutation(len(paths)):
        clip = recorded_voices.decode(paths[int(i)])
        if total + len(clip) > high * SAMPLE_RATE:
            continue
        pieces += [clip, np.zeros(SAMPLE_RATE // 4, np.float32)]
        total += len(clip) + SAMPLE_RATE // 4
        if total >= low * SAMPLE_RATE * 1.5:
            break
    return np.concatenate(pieces)


def owner(recording: Recording, turns, speaker: int) -> str | None:
    """The person who speaks most of ``speaker``'s turns."""
    said: Counter[str] = Counter()
    for turn in (t for t in turns if t.speaker == speaker):
        for truth in recording.turns:
            overlap = min(turn.end, truth.end) - max(turn.start, truth.start)
            if overlap > 0:
                said[truth.speaker] += overlap
    return said.most_common(1)[0][0] if said else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", nargs="+", default=["dev", "heldout"])
    parser.add_argument("--bars", nargs="+", type=float, default=[0.5, 0.6, 0.7])
    args = parser.parse_args()

    import torch

    from parley.config import DiarizationSettings, Settings
    from parley.core.recording_speakers import RecordingClustering
    from parley.core.speaker_count import SpeakerCount
    from parley.models.speaker_models import load_speaker_models
    from parley.recordings.files import FileLimits

    torch.set_num_threads(2)
    models = load_speaker_models("bundle", Settings().models_dir, torch.device("cpu"))
    config = DiarizationSettings().to_config()

    def embedded(clip: np.ndarray) -> np.ndarray:
        return models.embed(clip.astype(np.float32), np.ones((1, len(clip)), bool))[0]

    rows = []
    for split in args.split:
        people = {v.name: v for v in recorded_voices.available(split)}
        tally = {bar: Counter() for bar in args.bars}
        meetings = 0
        for (kind, speakers), count in PLAN[split].items():
            if kind != "recorded":
                continue
            for index in range(count):
                recording = make(split, kind, speakers, index)
                rng = np.random.default_rng(index * 7 + speakers)
                # make()'s own first draw: the people, in the order spk0, spk1... name them
                seed = SPLIT_SEED[split] + hash_of(kind, speakers, index)
                chosen = list(_recorded(np.random.default_rng(seed), split, speakers))
                spoken = {f"spk{i}": name for i, name in enumerate(chosen)}
                recording.turns = [replace(t, speaker=spoken[t.speaker]) for t in recording.turns]
                present = sorted(spoken.values())
                absent = [p for p in people if p not in present][:1]
                snapshot = models.diarize_recording(
                    recording.audio,
                    config,
                    RecordingClustering(),
                    SpeakerCount(),
                    FileLimits().diarization_step_s,
                )
                voices = {
                    s: embedded(voice_audio(recording.audio, snapshot.turns, s))
                    for s in sorted({t.speaker for t in snapshot.turns})
                }
                owners = {s: owner(recording, snapshot.turns, s) for s in voices}
                references = [
                    (name, embedded(reference(people[name], rng))) for name in present + absent
                ]
                meetings += 1
                for bar in args.bars:
                    named = named_voices(voices, references, bar)
                    given = {name: speaker for speaker, name in named.items()}
                    for name in present:
                        if name not in given:
                            tally[bar]["missed"] += 1
                        elif owners[given[name]] == name:
                            tally[bar]["right"] += 1
                        else:
                            tally[bar]["wrong"] += 1
                    tally[bar]["absent named"] += sum(name in given for name in absent)
                    tally[bar]["absent"] += len(absent)
                    tally[bar]["present"] += len(present)
        for bar in args.bars:
            t = tally[bar]
            rows.append(
                {
                    "split": split,
                    "bar": bar,
                    "meetings": meetings,
                    "names": t["present"],
                    "right": round(t["right"] / t["present"], 3),
                    "wrong": round(t["wrong"] / t["present"], 3),
                    "missed": round(t["missed"] / t["present"], 3),
                    "absent_named": f"{t['absent named']} of {t['absent']}",
                }
            )
    columns = ["split", "bar", "meetings", "names", "right", "wrong", "missed", "absent_named"]
    print_table(rows, columns)
    print(f"wrote {write_json('known-speakers', {'rows': rows})}")


if __name__ == "__main__":
    main()
