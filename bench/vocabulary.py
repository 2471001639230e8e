"""Keyterms, languages, translation and redaction, measured on speech with known text.

    python bench/vocabulary.py [--parts keyterms keyterms-festival languages
                                        languages-festival recorded-languages flag
                                        translation redaction redaction-groups fillers]

Every decode goes through the server's own request building and result shaping
(``runtime.decoding.StreamDecoding``: prompt, keyterm bias, language, task, redaction)
and the real engine, one segment at a time, so the figures are the model's and
Parley's, not a transport's (tests/test_vocabulary.py proves the wires). Speech is
espeak-ng's (bench/vocabulary_set.py), Festival's in the ``-festival`` parts
(bench/festival_voices.py: voices built from real speakers) and real speakers' in
``recorded-languages``; tiny.en for English, the multilingual base model for languages
and translation. Prints a table per part and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections import Counter
from pathlib import Path

import jiwer
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import engine_plan, machine, print_table, write_json

import festival_voices
from audio_fixtures import speak
from parley.config import default_models_dir
from parley.core.asr import Task
from parley.core.attempts import transcribe
from parley.core.audio import SAMPLE_RATE
from parley.core.keyterms import normalised, written
from parley.core.redaction import REDACTED, number_runs
from parley.models.whisper_engine import WhisperEngine
from parley.protocol.messages import Final, FinalReason, StreamConfig, Word
from parley.weights.bundle import resolve_model
from parley.workers.decoding import StreamDecoding
from vocabulary_set import (
    FILLER_SENTENCES,
    FILLER_WORDS,
    FOREIGN_SENTENCES,
    KEYTERM_SENTENCES,
    KEYTERM_VOICES,
    LANGUAGE_SENTENCES,
    LANGUAGE_VOICES,
    PLAIN_SENTENCES,
    REDACTION_SENTENCES,
    all_keyterms,
    keyterm_items,
)

PARTS = (
    "keyterms",
    "keyterms-festival",
    "languages",
    "languages-festival",
    "recorded-languages",
    "flag",
    "translation",
    "redaction",
    "redaction-groups",
    "fillers",
)


def engine(label: str) -> WhisperEngine:
    return WhisperEngine(resolve_model(label, default_models_dir()), label, engine_plan())


def say(text: str, voice: str | festival_voices.FestivalVoice) -> np.ndarray:
    """Speech of ``text``: espeak-ng's (a voice name) or Festival's."""
    if isinstance(voice, festival_voices.FestivalVoice):
        return festival_voices.speak(text, voice)
    return speak(text, voice)


def decode(model: WhisperEngine, audio: np.ndarray, config: StreamConfig):
    """(text, result) of one segment as a stream with ``config`` gets its final."""
    decoding = StreamDecoding.of(config, model)
    result = transcribe(model, decoding.request(audio, with_words=True, draft=None, context=()))
    return final_text(decoding, result, len(audio), result.heard_keyterms), result


def final_text(
    decoding: StreamDecoding, result, samples: int, heard: tuple[tuple[str, str], ...]
) -> str:
    """A final's text from ``result``, the runs ``heard`` as keyterms respelled."""
    words = [Word(w.word, w.start, w.end, w.probability) for w in result.words]
    words = decoding.respelled(words, heard)
    text = decoding.text(result.text, words)
    final = decoding.final(Final(0, 0.0, samples / SAMPLE_RATE, text, FinalReason.SILENCE, words))
    return final.text


# ---------------------------------------------------------------- keyterms


def keyterms(tiny: WhisperEngine, voices: tuple = KEYTERM_VOICES) -> list[dict]:
    """Recall of the terms, WER of the sentences without any, and false insertions, with
    the whole glossary (every term of the set) given to every sentence. The keyterms'
    decodes are scored three times: as the decoder wrote them (the bias alone), with
    runs spelled like a term respelled, and as a final says them (runs the model, asked,
    hears as a term respelled too)."""
    glossary = all_keyterms()
    items = keyterm_items(voices)
    audio = [say(item.text, item.voice) for item in items]
    texts: dict[str, list[str]] = {
        "no keyterms": [],
        "keyterms, bias only": [],
        "keyterms, respelled on letters": [],
        "keyterms": [],
    }
    seconds: Counter = Counter()  # decoding, with and without the keyterms
    for clip in audio:
        started = time.perf_counter()
        texts["no keyterms"].append(decode(tiny, clip, StreamConfig())[0])
        seconds["no keyterms"] += time.perf_counter() - started
        config = StreamConfig(keyterms=glossary)
        started = time.perf_counter()
        text, result = decode(tiny, clip, config)
        seconds["keyterms"] += time.perf_counter() - started
        on_letters = final_text(StreamDecoding.of(config, tiny), result, len(clip), ())
        texts["keyterms, bias only"].append(result.text)
        texts["keyterms, respelled on letters"].append(on_letters)
        texts["keyterms"].append(text)
    rows = []
    for name, decoded in texts.items():
        hits = terms = inserted = 0
        refs, hyps = [], []
        for item, text in zip(items, decoded):
            hits += sum(written(t, text) for t in item.terms)
            terms += len(item.terms)
            inserted += any(written(t, text) for t in glossary if t not in item.terms)
            if not item.terms:
                refs.append(normalised(item.text))
                hyps.append(normalised(text))
        rows.append(
            {
                "variant": name,
                "sentences": len(items),
                "with terms": sum(bool(i.terms) for i in items),
                "keyterm recall": round(hits / terms, 3),
                "plain WER": round(jiwer.wer(refs, hyps), 3),
                "false insertions": round(inserted / len(items), 3),
                "decode s a sentence": (
                    round(seconds[name] / len(items), 3) if name in seconds else "–"
                ),
            }
        )
    return rows


def keyterms_festival(tiny: WhisperEngine) -> list[dict]:
    """The keyterms part in Festival's two English voices (bench/festival_voices.py)."""
    return keyterms(tiny, festival_voices.KEYTERM_VOICES)


# ---------------------------------------------------------------- languages


def languages(
    base: WhisperEngine,
    sentences_of: dict[str, tuple[tuple[str, str], ...]] = LANGUAGE_SENTENCES,
    voices: dict = LANGUAGE_VOICES,
) -> list[dict]:
    """Per-segment language accuracy (any language, and among the set's six with
    ``languages``), and WER detected against forced, per language."""
    rows = []
    six = StreamConfig(languages=tuple(sentences_of))
    for code, sentences in sentences_of.items():
        right, among, refs, detected, forced, probabilities = 0, 0, [], [], [], []
        for sentence, _ in sentences:
            clip = say(sentence, voices[code])
            text, result = decode(base, clip, StreamConfig())
            right += result.language == code
            among += decode(base, clip, six)[1].language == code
            probabilities.append(result.language_probability or 0.0)
            refs.append(normalised(sentence))
            detected.append(normalised(text))
            forced.append(normalised(decode(base, clip, StreamConfig(language=code))[0]))
        rows.append(
            {
                "language": code,
                "segments": len(sentences),
                "language accuracy": round(right / len(sentences), 3),
                "among the six": round(among / len(sentences), 3),
                "mean probability": round(float(np.mean(probabilities)), 3),
                "WER detected": round(jiwer.wer(refs, detected), 3),
                "WER forced": round(jiwer.wer(refs, forced), 3),
            }
        )
    return rows


def languages_festival(base: WhisperEngine) -> list[dict]:
    """The languages part in Festival's voices of six languages: English and Italian
    from the espeak-ng set's sentences, Russian, Catalan, Finnish and Czech from
    bench/festival_voices.py."""
    sentences = {
        code: LANGUAGE_SENTENCES.get(code) or festival_voices.SENTENCES[code]
        for code in festival_voices.LANGUAGE_VOICES
    }
    return languages(base, sentences, festival_voices.LANGUAGE_VOICES)


def flag(tiny: WhisperEngine) -> list[dict]:
    """How often the English-only model's finals are flagged language_unsupported: on
    other languages (should be all) and on English (should be none)."""
    rows = []
    english = [
        (s, v)
        for s in PLAIN_SENTENCES + tuple(t for t, _ in KEYTERM_SENTENCES)
        for v in ("en-us", "en-gb-x-rp")
    ]
    groups = {"en": english}
    groups.update(
        {
            code: [(s, LANGUAGE_VOICES.get(code, code)) for s in sentences]
            for code, sentences in FOREIGN_SENTENCES.items()
        }
    )
    for code, spoken in groups.items():
        flagged = spoken_n = 0
        for sentence, voice in spoken:
            text, result = decode(tiny, speak(sentence, voice), StreamConfig())
            if not text:
                continue  # dropped as no speech: nothing shown to flag
            spoken_n += 1
            flagged += result.foreign
        rows.append(
            {
                "speech": code,
                "finals": spoken_n,
                "flagged language_unsupported": round(flagged / max(spoken_n, 1), 3),
            }
        )
    return rows


# Real speakers' recordings (Debian's Asterisk prompt packages, bench/recorded_voices.py),
# by language: professional voices reading whole sentences at 8 kHz, no text to score.
RECORDED_LANGUAGES = {
    "en": ("en_US_f_Allison",),
    "es": ("es_MX_f_Allison", "es"),
    "fr": ("fr_CA_f_June", "fr"),
    "it": ("it_IT_f_Menardi", "it_IT_m_Carlo"),
    "ru": ("ru_RU_f_IvrvoiceRU",),
}
RECORDED_PER_LANGUAGE = 24  # prompts of 2 s or more a language, spread over its voices
MIN_SEGMENT_S, MAX_SEGMENT_S = 2.0, 29.0  # one window each, as a live segment is


def recorded_languages(base: WhisperEngine) -> list[dict]:
    """Per-segment language accuracy on real speakers' sentences (any language, and among
    the five with ``languages``), per language."""
    import recorded_voices

    five = StreamConfig(languages=tuple(RECORDED_LANGUAGES))
    rows = []
    for code, folders in RECORDED_LANGUAGES.items():
        clips = []
        for folder in folders:
            voice = recorded_voices.RecordedVoice(
                folder, (recorded_voices.ASTERISK / folder,), False
            )
            if not voice.folders[0].is_dir():
                continue
            long_enough = [
                audio
                for audio in map(recorded_voices.decode, recorded_voices.clips(voice))
                if MIN_SEGMENT_S <= len(audio) / recorded_voices.SAMPLE_RATE <= MAX_SEGMENT_S
            ]
            step = max(1, len(long_enough) * len(folders) // RECORDED_PER_LANGUAGE)
            clips += long_enough[::step][: RECORDED_PER_LANGUAGE // len(folders)]
        if not clips:
            continue
        results = [decode(base, clip, StreamConfig())[1] for clip in clips]
        rows.append(
            {
                "language": code,
                "voices": len(folders),
                "segments": len(clips),
                "language accuracy": round(
                    sum(r.language == code for r in results) / len(clips), 3
                ),
                "among the five": round(
                    sum(decode(base, clip, five)[1].language == code for clip in clips)
                    / len(clips),
                    3,
                ),
                "mean probability": round(
                    float(np.mean([r.language_probability or 0.0 for r in results])), 3
                ),
                "detected as": ", ".join(
                    f"{lang} {n}" for lang, n in Counter(r.language for r in results).most_common(3)
                ),
            }
        )
    if not rows:
        print("no Asterisk prompt packages installed: bench/recorded_voices.py names them")
    return rows


# ---------------------------------------------------------------- translation


def translation(base: WhisperEngine) -> list[dict]:
    """chrF and BLEU of task=translate against the English references."""
    import sacrebleu

    rows = []
    for code, sentences in LANGUAGE_SENTENCES.items():
        if code == "en":
            continue
        hyps, refs, english = [], [], 0
        for sentence, reference in sentences:
            clip = speak(sentence, LANGUAGE_VOICES[code])
            text, result = decode(base, clip, StreamConfig(task=Task.TRANSLATE))
            hyps.append(text)
            refs.append(reference)
            english += _looks_english(text)
        rows.append(
            {
                "source": code,
                "sentences": len(sentences),
                "chrF": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 1),
                "BLEU": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1),
                "output in English": round(english / len(sentences), 3),
            }
        )
    return rows


_ENGLISH = set(
    "the a an to of in is it at on we my you me can where before please very "
    "so was has have and for from with near this that".split()
)


def _looks_english(text: str) -> bool:
    words = normalised(text).split()
    return bool(words) and sum(w in _ENGLISH for w in words) / len(words) >= 0.2


# ---------------------------------------------------------------- redaction


def outside_numbers(text: str) -> list[str]:
    """The words of ``text`` outside its number runs and redactions."""
    words = text.split()
    numbers = {i for start, end in number_runs(words) for i in range(start, end)}
    return [w for i, w in enumerate(words) if i not in numbers and REDACTED not in w]


def redaction(tiny: WhisperEngine) -> list[dict]:
    """Each spoken number's final under its own category alone: redacted with no digit
    left (or, with none to redact, unchanged), and every word outside the numbers kept."""
    rows = []
    for sentence, category in REDACTION_SENTENCES:
        clip = speak(sentence)
        plain, _ = decode(tiny, clip, StreamConfig())
        asked = (category,) if category else ("pci", "phone", "ssn")
        text, _ = decode(tiny, clip, StreamConfig(redact=asked))
        rows.append(
            {
                "said": sentence[:36],
                "category": category or "none",
                "decoded": plain[:44],
                "redacted": text[:44],
                "number gone": (REDACTED in text and not re.search(r"\d", text))
                if category
                else text == plain,
                "rest kept": outside_numbers(text) == outside_numbers(plain),
            }
        )
    return rows


def read_in_groups(sentence: str) -> np.ndarray:
    """``sentence`` read with a pause after each group of its number ("4 5 3 9, 1 4 8 8,
    …"): espeak-ng's speech of each group, whose own padding makes a pause of about
    0.8 s, enough to end a segment."""
    groups: list[str] = []
    for piece in sentence.split(", "):
        if groups and not piece[0].isdigit():
            groups[-1] += ", " + piece  # the words after the number stay with its last group
        else:
            groups.append(piece)
    return np.concatenate([speak(group) for group in groups])


def redaction_groups(tiny: WhisperEngine) -> list[dict]:
    """Each number read out in groups, streamed through a real Session: the finals as
    each would be judged alone (redaction before numbers were judged across finals)
    against what the stream sends with the category asked, from the same decodes."""
    from parley.core.vad import VadConfig
    from parley.sessions.session import Session
    from parley.sessions.session_options import SessionOptions
    from parley.workers.scheduler import AsrScheduler
    from test_session import drive

    async def finals(audio: np.ndarray, config: StreamConfig) -> list[Final]:
        worker = AsrScheduler(tiny, 8)
        await worker.start()
        try:
            session = Session(config, worker, SessionOptions(VadConfig()))
            return [m for m in await drive(session, audio) if isinstance(m, Final) and m.text]
        finally:
            await worker.stop()

    rows = []
    for sentence, category in REDACTION_SENTENCES:
        audio = read_in_groups(sentence)
        asked = StreamConfig(redact=(category,) if category else ("pci", "phone", "ssn"))
        plain = asyncio.run(finals(audio, StreamConfig()))
        streamed = asyncio.run(finals(audio, asked))
        alone = [StreamDecoding.of(asked, tiny).final(f).text for f in plain]

        def gone(texts: list[str], plain: list[Final] = plain, category: str = category) -> bool:
            """The number redacted with no digit left; with no number, nothing changed."""
            if not category:
                return texts == [f.text for f in plain]
            return any(REDACTED in t for t in texts) and not any(re.search(r"\d", t) for t in texts)

        rows.append(
            {
                "said": sentence[:36],
                "category": category or "none",
                "finals": len(plain),
                "decoded": " | ".join(f.text for f in plain)[:60],
                "each final alone": " | ".join(alone)[:60],
                "streamed": " | ".join(f.text for f in streamed)[:60],
                "number gone, alone": gone(alone),
                "number gone, streamed": gone([f.text for f in streamed]),
            }
        )
    return rows


# ---------------------------------------------------------------- filler words


def fillers(tiny: WhisperEngine) -> list[dict]:
    """Without and with ``filler_words``: the fillers said that are written (per
    sentence, at most as many as were said), the other words' WER, and the sentences
    without fillers: their WER, and how many got one written."""
    said = [(s, say(s, v)) for v in KEYTERM_VOICES for s in FILLER_SENTENCES]
    plain = [(s, say(s, v)) for v in KEYTERM_VOICES for s in PLAIN_SENTENCES]

    def split(text: str) -> tuple[int, str]:
        words = normalised(text).split()
        kept = [w for w in words if w not in FILLER_WORDS]
        return len(words) - len(kept), " ".join(kept)

    rows = []
    for asked in (False, True):
        config = StreamConfig(filler_words=asked)
        written = spoken = 0
        refs, hyps = [], []
        for text, clip in said:
            (count, ref), (got, hyp) = split(text), split(decode(tiny, clip, config)[0])
            written, spoken = written + min(got, count), spoken + count
            refs.append(ref)
            hyps.append(hyp)
        false = 0
        plain_refs, plain_hyps = [], []
        for text, clip in plain:
            got, hyp = split(decode(tiny, clip, config)[0])
            false += got > 0
            plain_refs.append(normalised(text))
            plain_hyps.append(hyp)
        rows.append(
            {
                "filler_words": asked,
                "sentences": f"{len(said)} + {len(plain)}",
                "fillers written": round(written / spoken, 3),
                "WER, other words": round(jiwer.wer(refs, hyps), 3),
                "plain WER": round(jiwer.wer(plain_refs, plain_hyps), 3),
                "plain with a filler": round(false / len(plain), 3),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--english-model",
        default="tiny.en",
        help="the model of the keyterms, flag and redaction parts",
    )
    args = parser.parse_args()
    tiny = engine(args.english_model)
    multilingual = {"languages", "languages-festival", "recorded-languages", "translation"}
    base = engine("base") if multilingual & set(args.parts) else None
    out: dict = {"machine": machine(), "english_model": args.english_model}
    columns = {
        "keyterms": [
            "variant",
            "sentences",
            "with terms",
            "keyterm recall",
            "plain WER",
            "false insertions",
            "decode s a sentence",
        ],
        "languages": [
            "language",
            "segments",
            "language accuracy",
            "among the six",
            "mean probability",
            "WER detected",
            "WER forced",
        ],
        "recorded-languages": [
            "language",
            "voices",
            "segments",
            "language accuracy",
            "among the five",
            "mean probability",
            "detected as",
        ],
        "flag": ["speech", "finals", "flagged language_unsupported"],
        "translation": ["source", "sentences", "chrF", "BLEU", "output in English"],
        "redaction": ["said", "category", "decoded", "redacted", "number gone", "rest kept"],
        "fillers": [
            "filler_words",
            "sentences",
            "fillers written",
            "WER, other words",
            "plain WER",
            "plain with a filler",
        ],
        "redaction-groups": [
            "said",
            "category",
            "finals",
            "decoded",
            "each final alone",
            "streamed",
            "number gone, alone",
            "number gone, streamed",
        ],
    }
    columns["keyterms-festival"] = columns["keyterms"]
    columns["languages-festival"] = columns["languages"]
    for part in args.parts:
        model = base if part in multilingual else tiny
        rows = globals()[part.replace("-", "_")](model)
        print(f"\n{part}")
        print_table(rows, columns[part])
        out[part] = rows
    for part, among in (
        ("languages", "among the six"),
        ("languages-festival", "among the six"),
        ("recorded-languages", "among the five"),
    ):
        if out.get(part):
            segments: Counter = Counter()
            for row in out[part]:
                segments["right"] += round(row["language accuracy"] * row["segments"])
                segments["among"] += round(row[among] * row["segments"])
                segments["all"] += row["segments"]
            out[f"{part}_accuracy"] = {
                "any": round(segments["right"] / segments["all"], 3),
                among: round(segments["among"] / segments["all"], 3),
            }
            print(f"\n{part}: accuracy over all segments: {out[f'{part}_accuracy']}")
    print(write_json("vocabulary", out))


if __name__ == "__main__":
    main()
