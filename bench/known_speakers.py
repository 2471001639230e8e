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

``--live`` names a stream's voices instead, as the server does for a stream's
``known_speaker`` clips (protocol.md section 2): the live linking's voices (their
centroids) over the cached windows of bench/speakers.py, at the end of the stream and
after its closing relabel (the clustered voices), and how many names were, at some
moment of the stream (every 2 s), on a voice whose words so far were mostly another's.

Usage: python bench/known_speakers.py [--split dev heldout] [--bars 0.5 0.6 0.7] [--live]
"""

from __future__ import annotations

import argparse
import pickle
from collections import Counter
from dataclasses import replace

from common import print_table, write_json

import numpy as np

import recorded_voices
from devset import PLAN, SAMPLE_RATE, SPLIT_SEED, Recording, _recorded, hash_of, make
from parley.core.speaker_names import REFERENCE_SECONDS, embedded_clip, named_voices, voice_audio


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


def meetings(split: str, people: dict, embedded):
    """Each recorded meeting of ``split``: the recording (its turns by person), the people
    in it, one person of the split who is not, and a reference clip's embedding of each."""
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
            references = [
                (name, embedded(reference(people[name], rng))) for name in present + absent
            ]
            yield recording, present, absent, references


def tally_names(tally: Counter, named: dict, owners: dict, present: list, absent: list) -> None:
    """Count one meeting's names (speaker → name) against who owns each speaker."""
    given = {name: speaker for speaker, name in named.items()}
    for name in present:
        if name not in given:
            tally["missed"] += 1
        elif owners[given[name]] == name:
            tally["right"] += 1
        else:
            tally["wrong"] += 1
    tally["absent named"] += sum(name in given for name in absent)
    tally["absent"] += len(absent)
    tally["present"] += len(present)


def recording_names(models, config, recording, references, bar: float) -> tuple[dict, dict]:
    """A recording diarized as the file pipeline does it, its voices named: (named, owners)."""
    from parley.core.recording_speakers import RecordingClustering
    from parley.core.speaker_count import SpeakerCount
    from parley.recordings.files import FileLimits

    snapshot = models.diarize_recording(
        recording.audio,
        config,
        RecordingClustering(),
        SpeakerCount(),
        FileLimits().diarization_step_s,
    )
    voices = {
        s: embedded_clip(models.embed, voice_audio(recording.audio, snapshot.turns, s))
        for s in sorted({t.speaker for t in snapshot.turns})
    }
    owners = {s: owner(recording, snapshot.turns, s) for s in voices}
    return named_voices(voices, references, bar), owners


def live_names(models, recording, references, every_s: float = 2.0):
    """A stream of the recording, stepped as the server steps it over the cached windows
    of bench/speakers.py, its known speakers given first: every ``every_s`` the names and
    owners as they stand ((named, owners) pairs), then those of the closing relabel."""
    from parley.core.speaker_relabel import closing_timeline
    from parley.core.stream_diarizer import StreamDiarizer
    from speakers import LIVE_STEP_S, OBSERVATIONS, config_with

    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    diarizer = StreamDiarizer(models, config_with({}))
    diarizer.known = tuple(references)
    checks = []
    for k, window in enumerate(cached["windows"]):
        diarizer.link(window)
        diarizer.timeline.advance((k + 1) * LIVE_STEP_S)
        if round((k + 1) * LIVE_STEP_S / every_s, 6).is_integer():
            live = diarizer.timeline.snapshot(diarizer.clustering.aliases())
            owners = {s: owner(recording, live.turns, s) for s in {t.speaker for t in live.turns}}
            checks.append(({s: n for s, n in diarizer.names().items() if s in owners}, owners))
    diarizer.timeline.advance(recording.duration, final=True)
    live = diarizer.timeline.snapshot(diarizer.clustering.aliases())
    owners = {s: owner(recording, live.turns, s) for s in {t.speaker for t in live.turns}}
    checks.append(({s: n for s, n in diarizer.names().items() if s in owners}, owners))
    closing = closing_timeline(diarizer)
    owners = {s: owner(recording, closing.turns, s) for s in {t.speaker for t in closing.turns}}
    return checks, (closing.names, owners)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", nargs="+", default=["dev", "heldout"])
    parser.add_argument("--bars", nargs="+", type=float, default=[0.5, 0.6, 0.7])
    parser.add_argument(
        "--live",
        action="store_true",
        help="name a stream's voices as the server does live (at the bar the server uses), "
        "from the cached windows of bench/speakers.py",
    )
    args = parser.parse_args()

    import torch

    from parley.config import DiarizationSettings, Settings
    from parley.models.speaker_models import load_speaker_models

    torch.set_num_threads(2)
    models = load_speaker_models("bundle", Settings().models_dir, torch.device("cpu"))
    config = DiarizationSettings().to_config()
    rows = []
    for split in args.split:
        people = {v.name: v for v in recorded_voices.available(split)}
        modes = ["live, at the end", "closing relabel"] if args.live else args.bars
        tally: dict = {mode: Counter() for mode in modes}
        count = 0
        for recording, present, absent, references in meetings(
            split, people, lambda clip: embedded_clip(models.embed, clip)
        ):
            count += 1
            if not args.live:
                for bar in args.bars:
                    named, owners = recording_names(models, config, recording, references, bar)
                    tally_names(tally[bar], named, owners, present, absent)
                continue
            checks, closing = live_names(models, recording, references)
            tally_names(tally["live, at the end"], *checks[-1], present, absent)
            tally_names(tally["closing relabel"], *closing, present, absent)
            # a present person's name ever on a voice whose words were mostly another's
            wrong = {n for named, owners in checks for s, n in named.items() if owners[s] != n}
            tally["live, at the end"]["ever wrong"] += len(wrong & set(present))
        for mode in modes:
            t = tally[mode]
            rows.append(
                {
                    "split": split,
                    "mode": mode if args.live else f"recording, bar {mode}",
                    "meetings": count,
                    "names": t["present"],
                    "right": round(t["right"] / t["present"], 3),
                    "wrong": round(t["wrong"] / t["present"], 3),
                    "missed": round(t["missed"] / t["present"], 3),
                    "ever_wrong_live": round(t["ever wrong"] / t["present"], 3)
                    if mode == "live, at the end"
                    else "",
                    "absent_named": f"{t['absent named']} of {t['absent']}",
                }
            )
    columns = ["split", "mode", "meetings", "names", "right", "wrong", "missed"]
    columns += ["ever_wrong_live", "absent_named"]
    print_table(rows, columns)
    print(f"wrote {write_json('known-speakers', {'rows': rows})}")


if __name__ == "__main__":
    main()
