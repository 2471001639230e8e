"""Encoder windows shorter than 30 s: what they save and what they cost in words.

Every clip is decoded alone by the real engine, once over the whole 30 s window and once
for each margin (the clip and that much padding, ``asr.window_margin_s``), each clip's
decodes in turn so that the machine's noise falls on all alike. Clips with known text:
held-out sentences in four espeak-ng voices, the same in Festival's two English voices
(where installed), pairs of sentences, sample.wav's turns (its .stm), and three of
KTuberling's real spoken English words at a time (``ktuberling-data``). Asterisk's
Allison (a real voice, no text) is scored against the whole window's decode.

Reports, per margin: WER by kind of clip, words changed against the whole window's
decode, the share of clips that ran on and were decoded again over the whole window,
and the time all decodes took as a ratio to the whole window's. Usage:
python bench/windows.py [--model tiny.en] [--margins 2 3 4]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from common import engine_plan, print_table, write_json  # first: it puts tests/ on the path

import numpy as np

from audio_fixtures import SAMPLE_WAV, read_wav, sample_turns, speak, wer
from devset import SENTENCES

ESPEAK_VOICES = ("en-us", "en-us+f3", "en-gb", "en-us+m3")
CLIPS_PER_KIND = 16


def clips() -> list[tuple[str, np.ndarray, str]]:
    """(kind, audio, text) for every clip; text "" where none is known."""
    import festival_voices
    import recorded_voices

    sentences = SENTENCES["heldout"]
    out = [
        ("espeak", speak(s, ESPEAK_VOICES[i % 4]), s)
        for i, s in enumerate(sentences[:CLIPS_PER_KIND])
    ]
    if festival_voices.installed():
        voices = festival_voices.KEYTERM_VOICES
        out += [
            ("festival", festival_voices.speak(s, voices[i % 2]), s)
            for i, s in enumerate(sentences[CLIPS_PER_KIND : 2 * CLIPS_PER_KIND])
        ]
    pause = np.zeros(8000, np.float32)
    for i in range(8):
        first, second = sentences[i], sentences[i + 8]
        audio = np.concatenate([speak(first, "en-us"), pause, speak(second, "en-gb")])
        out.append(("two sentences", audio, f"{first} {second}"))
    wav = read_wav(SAMPLE_WAV)
    for turn in sample_turns():
        span = wav[int(turn.start * 16000) : int(turn.end * 16000)]
        out.append(("sample.wav turns", span, turn.text))
    words = sorted((recorded_voices.KTUBERLING / "en").glob("*.ogg"))
    rng = np.random.default_rng(1)
    for _ in range(30 if words else 0):
        picked = [words[j] for j in rng.choice(len(words), 3, replace=False)]
        parts = [recorded_voices.decode(p) for p in picked]
        audio = np.concatenate([parts[0], pause[:4800], parts[1], pause[:4800], parts[2]])
        out.append(("KTuberling words", audio, " ".join(p.stem for p in picked)))
    english = recorded_voices.ASTERISK / "en_US_f_Allison"
    prompts = sorted(english.glob("*.wav"))[::7] if english.is_dir() else []
    allison = [a for a in map(recorded_voices.decode, prompts) if 1.5 <= len(a) / 16000 <= 12]
    out += [("Allison (no text)", a, "") for a in allison[:40]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--margins", nargs="+", type=float, default=[2.0, 3.0, 4.0])
    args = parser.parse_args()
    from parley.config import Settings
    from parley.core.asr import AsrRequest
    from parley.core.attempts import transcribe
    from parley.models.whisper_engine import WhisperEngine
    from parley.weights.bundle import resolve_model

    source = resolve_model(args.model, Settings().models_dir)
    engines = {None: WhisperEngine(source, args.model, engine_plan())}
    engines |= {
        m: WhisperEngine(source, args.model, engine_plan(), window_margin_s=m) for m in args.margins
    }
    made = clips()
    texts: dict[float | None, list[str]] = {m: [] for m in engines}
    seconds = dict.fromkeys(engines, 0.0)
    ran_on = dict.fromkeys(engines, 0)
    for _, audio, _ in made:
        for margin, engine in engines.items():
            request = AsrRequest(audio, "en")
            began = time.perf_counter()
            (decode,) = engine.start([request])
            while not decode.finished:
                engine.step([decode], [0])
            result = engine.finish(decode)
            if result.window_too_short:  # what the scheduler does (core.asr.second_attempt)
                ran_on[margin] += 1
                result = transcribe(engine, replace(request, whole_window=True), budget=0)
            seconds[margin] += time.perf_counter() - began
            texts[margin].append(result.text)
    kinds = list(dict.fromkeys(kind for kind, _, _ in made))
    rows = []
    for margin in engines:
        row = {"window": "whole 30 s" if margin is None else f"clip + {margin:g} s"}
        for kind in kinds:
            picked = [i for i, (k, _, _) in enumerate(made) if k == kind]
            said = " ".join(made[i][2] for i in picked)
            heard = " ".join(texts[margin][i] for i in picked)
            whole = " ".join(texts[None][i] for i in picked)
            row[kind] = round(wer(said, heard), 3) if said.strip() else None
            row[f"{kind}: changed"] = round(wer(whole, heard), 3) if whole.strip() else None
        row["decoded again"] = round(ran_on[margin] / len(made), 3)
        row["time / whole"] = round(seconds[margin] / seconds[None], 3)
        rows.append(row)
    columns = ["window", *[k for k in kinds if any(r[k] is not None for r in rows)]]
    columns += ["Allison (no text): changed", "decoded again", "time / whole"]
    mean_s = np.mean([len(a) for _, a, _ in made]) / 16000
    print(f"{args.model}, {len(made)} clips, mean {mean_s:.1f} s")
    print_table(rows, columns)
    print(f"wrote {write_json('windows', {'model': args.model, 'rows': rows})}")


if __name__ == "__main__":
    main()
