"""Keyterms: a caller's names, products and jargon, which the decoder favours.

``KeytermBias`` adds to the logits of the tokens that begin a term, and more to those
that continue a term the text has begun: contextual biasing by a token trie. The bias
is a function of the tokens before a position only, so greedy decoding and draft
verification under it stay exact: what the decoder keeps is what plain greedy decoding
with the same bias would choose.

The bias cannot follow a term whose first token the model never considers: tiny.en
hears "Alembic" as "a limbic" and "Okonkwo" as "Okonk". So a final's words are then
read again (``respellings``): a run of words spelled like a term, of which the model
was unsure, is written as the term. A run less alike than that is written as a term
only where the model, asked once more over the same audio, finds the text with the
term about as likely as the text it wrote (``to_ask``; the engine asks,
``Transcription.heard_keyterms``): tiny.en writes "Kubernetes" as "Qubanit" in one
voice, and finds the text with the term as likely; a near miss is asked again with
the term in Whisper's prompt (``near_miss``). That reads the decoded words after the
decode; the tokens stay what the biased decode chose.

The terms are not also written into Whisper's prompt (``<|startofprev|>``): measured
on bench/vocabulary.py's set, a prompt listing 40 terms made tiny.en write lists of
them where nobody said one (8 % of sentences) and raised the WER of sentences without
terms by 0.04, while the bias alone kept both unchanged. A caller's own ``prompt``
still goes there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.fuzz import ratio
from rapidfuzz.process import cdist

from parley.core.words import end_punctuation

MAX_KEYTERMS = 100  # terms a stream or file may give
MAX_KEYTERM_CHARS = 50  # characters in one term
# The bias, in logits: a term's first token a little, its continuation much more, once
# the text has begun it (chosen on bench/vocabulary.py: a start bonus of 4 made false
# insertions, 3 none; recall rose from 1 to 3).
START_BONUS = 3.0
CONTINUE_BONUS = 8.0
BEGUN_LETTERS = 2  # letters of a term written before it gets the continuation bonus
# Respelling (chosen on the en-us third of bench/vocabulary.py's set, where recall was the
# same from 73 to 78 and from 0.7 up; the lowest probability there keeps the most words
# the model was sure of): a run is written as a term when their letters are this alike
# (rapidfuzz's ratio, 0-100), its least sure word is under this probability, and it has
# at most this many words more than the term.
RESPELL_SIMILARITY = 75.0
RESPELL_UNSURE = 0.7
RESPELL_EXTRA_WORDS = 2
# Asking the model (chosen on the espeak-ng half of bench/vocabulary.py's keyterms with
# tiny.en and base, the Festival half scored after; bench/VARIANTS.md, "Keyterms the
# model is asked about"): runs at least ASK_SIMILARITY alike, the ASKED_RUNS most alike
# of a final, each written as its term where that text is at most HEARD_MARGIN nats
# less likely, and the term's own tokens are HEARD_TERM_LOGPROB probable or more on
# average (base found fluent terms likelier than unsure runs of plain words: "Please
# end me the report" → "Please Kubernetes report").
ASK_SIMILARITY = 40.0
ASKED_RUNS = 16
HEARD_MARGIN = 3.0
HEARD_TERM_LOGPROB = -4.0
# A near miss of that (the text with the term at most NEAR_MISS_MARGIN nats less likely,
# the term's tokens NEAR_MISS_TERM_LOGPROB probable or more) is asked again with the term
# in Whisper's prompt, and heard where the text with the term is then PROMPTED_MARGIN
# nats the likelier and the term's tokens PROMPTED_TERM_LOGPROB probable on average.
# Chosen on the espeak-ng half of bench/vocabulary.py's keyterms with tiny.en (false
# insertions kept at asking once's), the Festival half and base scored after
# (bench/VARIANTS.md, "Keyterms the model is asked about").
NEAR_MISS_MARGIN = 15.0
NEAR_MISS_TERM_LOGPROB = -6.0
PROMPTED_MARGIN = 2.0
PROMPTED_TERM_LOGPROB = -0.5


def check_keyterms(terms: Iterable[str]) -> tuple[str, ...]:
    """The terms, stripped, empty ones and repeats dropped; ValueError past the bounds."""
    kept: list[str] = []
    for term in terms:
        term = " ".join(term.split())
        if not term or term in kept:
            continue
        if len(term) > MAX_KEYTERM_CHARS:
            raise ValueError(
                f"a keyterm has at most {MAX_KEYTERM_CHARS} characters: "
                f"{term[:20]!r}… has {len(term)}"
            )
        kept.append(term)
    if len(kept) > MAX_KEYTERMS:
        raise ValueError(f"at most {MAX_KEYTERMS} keyterms; {len(kept)} were given")
    return tuple(kept)


@dataclass(frozen=True)
class KeytermBias:
    """A trie over the terms' token sequences, and the bonus each next token gets.

    A term the text has already written once gets no more bonus in that text: given
    many terms, a biased decode can otherwise write them as a list, over and over,
    until the decoder is full (tiny.en, bench/vocabulary.py's 38 terms, "Xiomara leads
    the onboarding call" → " Zendesk, Zendesk, …" for 446 passes). That rule depends
    only on the tokens before a position, so decoding stays exact. A decode the bias
    still derails into a loop of the model's own is decoded again without it
    (``core.attempts.second_attempt``)."""

    sequences: tuple[tuple[int, ...], ...]
    terms: tuple[str, ...] = ()  # as written: what a run the model hears as one becomes
    start_bonus: float = START_BONUS
    continue_bonus: float = CONTINUE_BONUS
    # Prefixes of a term too short to say it has begun (``of``): they get the start bonus.
    weak_prefixes: frozenset[tuple[int, ...]] = frozenset()
    # prefix → next token → the terms (indices) that continue through it
    _next: dict[tuple[int, ...], dict[int, frozenset[int]]] = field(
        init=False, repr=False, compare=False
    )
    _terms: dict[tuple[int, ...], frozenset[int]] = field(init=False, repr=False, compare=False)
    # a term's last token → the lengths of the terms it ends (where a term may end)
    _endings: dict[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _longest: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        following: dict[tuple[int, ...], dict[int, set[int]]] = {}
        terms: dict[tuple[int, ...], set[int]] = {}
        endings: dict[int, set[int]] = {}
        for index, sequence in enumerate(self.sequences):
            terms.setdefault(tuple(sequence), set()).add(index)
            if sequence:
                endings.setdefault(sequence[-1], set()).add(len(sequence))
            for i in range(len(sequence)):
                step = following.setdefault(tuple(sequence[:i]), {})
                step.setdefault(sequence[i], set()).add(index)
        nexts = {k: {t: frozenset(v) for t, v in step.items()} for k, step in following.items()}
        object.__setattr__(self, "_next", nexts)
        object.__setattr__(self, "_terms", {k: frozenset(v) for k, v in terms.items()})
        object.__setattr__(self, "_endings", {k: frozenset(v) for k, v in endings.items()})
        object.__setattr__(self, "_longest", max(map(len, self.sequences), default=0))

    @classmethod
    def of(
        cls,
        sequences: Sequence[tuple[int, ...]],
        decode: Callable[[Sequence[int]], str],
        terms: Sequence[str] = (),
    ) -> KeytermBias:
        """The bias of terms tokenized as ``sequences`` (``terms``: as written); ``decode``
        writes tokens as text.

        A prefix holding fewer than ``BEGUN_LETTERS`` letters (a multilingual tokenizer
        begins "Nguyen" with " N", "troponin" with a bare space) is weak: the text
        writing it has begun any word with that letter, so continuing to the term gets
        only the start bonus. With the continuation's 8, base wrote "to the city" as
        "to Nguyen City" and "The server room" as "Nguyen Rui Rui"."""
        weak = {
            sequence[:i]
            for sequence in sequences
            for i in range(1, len(sequence))
            if len(letters_of(decode(sequence[:i]))) < BEGUN_LETTERS
        }
        return cls(tuple(sequences), tuple(terms), weak_prefixes=frozenset(weak))

    def written(self, tokens: Sequence[int]) -> set[int]:
        """The terms (indices into ``sequences``) that ``tokens`` hold whole."""
        done: set[int] = set()
        for end, token in enumerate(tokens, 1):  # only where some term's last token is
            for k in self._endings.get(token, ()):
                if k <= end:
                    done |= self._terms.get(tuple(tokens[end - k : end]), frozenset())
        return done

    def bonuses(self, tokens: Sequence[int]) -> dict[int, float]:
        """Token → bonus for the position after ``tokens`` (the text decoded so far)."""
        done = self.written(tokens)
        out: dict[int, float] = {}
        if self.start_bonus:
            for token, terms in self._next.get((), {}).items():
                if terms - done:
                    out[token] = self.start_bonus
        for k in range(1, min(self._longest, len(tokens) + 1)):
            prefix = tuple(tokens[-k:])
            bonus = self.start_bonus if prefix in self.weak_prefixes else self.continue_bonus
            for token, terms in self._next.get(prefix, {}).items():
                if terms - done:
                    out[token] = max(out.get(token, 0.0), bonus)
        return out


def letters_of(text: str) -> str:
    """A text's letters and digits, lower case: what respelling and search compare."""
    return re.sub(r"[^\w]|_", "", text.lower())


def normalised(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: text as terms are looked up in."""
    return " ".join(re.sub(r"[^\w ]", " ", text.lower()).split())


def written(term: str, text: str) -> bool:
    """Whether ``text`` holds ``term`` as whole words, case and punctuation aside."""
    return _holds(normalised(text), term)


def _holds(normalised_text: str, term: str) -> bool:
    return re.search(rf"\b{re.escape(normalised(term))}\b", normalised_text) is not None


@dataclass(frozen=True)
class Respelling:
    """Words ``start:end`` of a final that may be ``term`` misheard."""

    start: int
    end: int
    term: str
    alike: float  # their letters' similarity (rapidfuzz's ratio, 0-100)
    letters: str  # the run's letters: how ``heard_keyterms`` names it


def respellings(
    words: Sequence[tuple[str, float]],
    terms: Sequence[str],
    heard: Collection[tuple[str, str]] = (),
) -> list[tuple[int, int, str]]:
    """``(start, end, term)``: the runs ``words[start:end]`` (each word's text and
    probability) to write as ``term``, none overlapping: those ``heard`` (``(letters,
    term)`` pairs the model was asked about and found likely enough:
    ``Transcription.heard_keyterms``), then those spelled like it, the most alike first.

    A term already written is left alone, and so is a run with a word that holds a
    term's letters (an inflection: "Terraforms", "Kafka's"). Each term is written at
    most once: a term said twice in one final keeps the model's second spelling."""
    heard = set(heard)
    taken: set[int] = set()
    chosen: dict[str, tuple[int, int]] = {}
    runs = _candidates(words, terms, ASK_SIMILARITY if heard else RESPELL_SIMILARITY)
    # A run the model heard as its term goes before runs only spelled like one: tiny.en's
    # "Check the Ramanash Lord" is Grafana to the model, whatever its letters make of
    # Ramanathan (bench/VARIANTS.md, "Keyterms the model is asked about").
    runs.sort(key=lambda run: (run.letters, run.term) not in heard)  # stable: most alike first
    for run in runs:
        if run.alike < RESPELL_SIMILARITY and (run.letters, run.term) not in heard:
            continue
        if run.term in chosen or taken.intersection(range(run.start, run.end)):
            continue
        taken.update(range(run.start, run.end))
        chosen[run.term] = (run.start, run.end)
    return sorted((start, end, term) for term, (start, end) in chosen.items())


def to_ask(words: Sequence[tuple[str, float]], terms: Sequence[str]) -> list[Respelling]:
    """The runs the model is asked about: not spelled enough like a term to be respelled
    on their letters, and not too unlike one; the most alike first, at most ASKED_RUNS."""
    runs = _candidates(words, terms, ASK_SIMILARITY)
    return [run for run in runs if run.alike < RESPELL_SIMILARITY][:ASKED_RUNS]


def near_miss(margin: float, term_logprob: float) -> bool:
    """Whether a run asked about, its text with the term ``margin`` nats likelier than
    the text the model wrote and the term's tokens ``term_logprob`` probable on average,
    is asked again with the term in the prompt (``models.keyterm_check``)."""
    return margin >= -NEAR_MISS_MARGIN and term_logprob >= NEAR_MISS_TERM_LOGPROB


def written_as(texts: Sequence[str], run: Respelling) -> str:
    """The words ``texts`` as one text, with ``run`` written as its term."""
    last = texts[run.end - 1]
    term = run.term + end_punctuation(last)
    return " ".join([*texts[: run.start], term, *texts[run.end :]]).strip()


def _candidates(
    words: Sequence[tuple[str, float]], terms: Sequence[str], least: float
) -> list[Respelling]:
    """Runs at least ``least`` alike to a term not yet written, with a word the model was
    unsure of, the most alike first."""
    texts = [w for w, _ in words]
    sure = [p >= RESPELL_UNSURE for _, p in words]
    spelled = [letters_of(w) for w in texts]
    text = normalised(" ".join(texts))  # once, not once a term
    open_terms = [t for t in terms if letters_of(t) and not _holds(text, t)]
    if not open_terms:
        return []
    longest = max(len(t.split()) for t in open_terms) + RESPELL_EXTRA_WORDS
    runs = [
        (start, end)
        for start in range(len(words))
        for end in range(start + 1, min(start + longest, len(words)) + 1)
        if not all(sure[start:end]) and any(spelled[start:end])
    ]
    if not runs:
        return []
    letters = [letters_of(t) for t in open_terms]
    # Every run against every term in one call (rapidfuzz's C loop): a final of 80 words
    # and 100 terms is 24,000 pairs, and this runs on the event loop.
    alike = cdist(
        ["".join(spelled[a:b]) for a, b in runs],
        letters,
        scorer=ratio,
        score_cutoff=least,
    )
    candidates = []
    for r, k in zip(*np.nonzero(alike)):
        (start, end), term = runs[r], open_terms[k]
        if end - start > len(term.split()) + RESPELL_EXTRA_WORDS:
            continue
        if any(letters[k] in word for word in spelled[start:end]):
            continue
        run = "".join(spelled[start:end])
        candidates.append(Respelling(start, end, term, float(alike[r, k]), run))
    return sorted(candidates, key=lambda c: (-c.alike, c.start, c.end, c.term))
