"""How Deepgram's pre-recorded answers group a recording's words: utterances (split at
pauses of ``utt_split``) and paragraphs, whose runs AssemblyAI's sentences and
paragraphs share; and the speaker numbers Deepgram gives (S1 is 0)."""

from __future__ import annotations

from parley.core.words import ends_sentence
from parley.protocol.messages import Final, Word

PARAGRAPH_PAUSE_S = 2.0  # silence after a sentence that ends a paragraph
UTT_SPLIT_S = 0.8  # Deepgram's default pause between words that starts a new utterance
MAX_UTT_SPLIT_S = 60.0


def speaker_number(label: str | None) -> int | None:
    """S1 → 0, S2 → 1, …; None for no label, or one that is a name."""
    return int(label[1:]) - 1 if label and label[1:].isdigit() else None


def paragraph_runs(finals: list[Final], diarize: bool) -> list[list[Final]]:
    """Finals joined into paragraphs: a new one at a change of speaker (with
    ``diarize``) or after a sentence followed by ``PARAGRAPH_PAUSE_S`` of silence."""
    groups: list[list[Final]] = []
    for final in (f for f in finals if f.words):
        last = groups[-1][-1] if groups else None
        if (
            last is None
            or (diarize and last.speaker != final.speaker)
            or (final.start - last.end >= PARAGRAPH_PAUSE_S and ends_sentence(last.words[-1].word))
        ):
            groups.append([final])
        else:
            groups[-1].append(final)
    return groups


def sentence_runs(words: list[Word]) -> list[list[Word]]:
    """Punctuated words cut into sentences after each word ending in . ? or !"""
    sentences: list[list[Word]] = [[]]
    for w in words:
        sentences[-1].append(w)
        if ends_sentence(w.word):
            sentences.append([])
    return [s for s in sentences if s]


def deepgram_paragraphs(finals: list[Final], diarize: bool) -> dict:
    """Deepgram's ``paragraphs``: the finals' ``paragraph_runs``, each paragraph's
    words cut into sentences (``sentence_runs``)."""
    paragraphs = []
    for group in paragraph_runs(finals, diarize):
        words = [w for f in group for w in f.words]
        paragraph: dict = {
            "sentences": [
                {"text": " ".join(w.word for w in s), "start": s[0].start, "end": s[-1].end}
                for s in sentence_runs(words)
            ],
            "num_words": len(words),
            "start": words[0].start,
            "end": words[-1].end,
        }
        if diarize:
            paragraph["speaker"] = speaker_number(group[0].speaker) or 0
        paragraphs.append(paragraph)
    transcript = "".join(
        "\n"
        + (f"Speaker {p['speaker']}: " if diarize else "")
        + " ".join(s["text"] for s in p["sentences"])
        + "\n"
        for p in paragraphs
    )
    return {"transcript": transcript, "paragraphs": paragraphs}


def utterance_words(finals: list[Final], diarize: bool, split_s: float) -> list[list[Word]]:
    """The words in Deepgram's utterances: a new one after a pause of ``split_s`` or more
    between two words, or (with ``diarize``) at a change of speaker."""
    runs: list[list[Word]] = []
    for word in (w for f in finals for w in f.words):
        last = runs[-1][-1] if runs else None
        if (
            last is None
            or word.start - last.end >= split_s
            or (diarize and word.speaker != last.speaker)
        ):
            runs.append([])
        runs[-1].append(word)
    return runs
