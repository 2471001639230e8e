"""Keyterms, redaction and the decoding settings, pure: the trie's bonuses, the number
runs redaction finds, and the query parameters protocol.md section 1 gives them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.asr import (
    AsrRequest,
    Decoding,
    Task,
    Transcription,
    decoding_problem,
    with_fillers,
)
from parley.core.attempts import (
    FALLBACK_BELOW,
    FALLBACK_TEMPERATURES,
    NO_REPEAT_TOKENS,
    SECOND_LANGUAGE_BELOW,
    better_attempt,
    second_attempt,
)
from parley.core.keyterms import (
    ASK_SIMILARITY,
    ASKED_RUNS,
    CONTINUE_BONUS,
    MAX_KEYTERMS,
    RESPELL_SIMILARITY,
    RESPELL_UNSURE,
    START_BONUS,
    KeytermBias,
    Respelling,
    check_keyterms,
    respellings,
    to_ask,
    written_as,
)
from parley.core.number_chain import NUMBER_GAP_S, NumberChain
from parley.core.redaction import REDACTED, Carry, Redact, number_runs, rewrite, rewrite_text
from parley.protocol.messages import (
    ErrorCode,
    Final,
    Finalized,
    FinalReason,
    Partial,
    ProtocolError,
    SessionEnded,
    SpeechStarted,
    StreamConfig,
    Word,
)
from parley.sessions.number_hold import MAX_HOLD_S, NumberHold, Unshaped
from parley.workers.decoding import StreamDecoding

ALL = frozenset({Redact.PCI, Redact.SSN, Redact.PHONE})


def test_a_term_is_favoured_from_its_start_and_more_once_begun():
    """Every term's first token gets the start bonus; the next token of a term the text
    has begun gets the larger one, wherever the term began; nothing else gets any."""
    bias = KeytermBias(((5, 6, 7), (5, 9), (8,)))
    assert bias.bonuses([]) == {5: START_BONUS, 8: START_BONUS}
    assert bias.bonuses([1, 2, 5]) == {
        5: START_BONUS,
        8: START_BONUS,
        6: CONTINUE_BONUS,
        9: CONTINUE_BONUS,
    }
    assert bias.bonuses([5, 6]) == {5: START_BONUS, 8: START_BONUS, 7: CONTINUE_BONUS}
    assert bias.bonuses([5, 6, 7]) == {5: START_BONUS, 8: START_BONUS}  # the term is done


def test_a_term_begun_by_one_letter_is_not_yet_begun():
    """A multilingual tokenizer writes " Nguyen" as " N", "gu", "yen": after " N" alone
    (any word beginning with N) the term's next token gets only the start bonus; after
    " Ngu" the continuation's. A term begun by two letters is begun at once."""
    pieces = {5: " N", 6: "gu", 7: "yen", 8: " Kub", 9: "ernetes"}
    bias = KeytermBias.of([(5, 6, 7), (8, 9)], lambda tokens: "".join(pieces[t] for t in tokens))
    assert bias.weak_prefixes == {(5,)}
    assert bias.bonuses([5]) == {5: START_BONUS, 8: START_BONUS, 6: START_BONUS}
    assert bias.bonuses([5, 6])[7] == bias.bonuses([8])[9] == CONTINUE_BONUS


def test_a_term_written_once_is_favoured_no_more():
    """Once the text holds a term whole, neither its start nor its continuation gets a
    bonus (a biased decode cannot write the glossary over and over); other terms still do."""
    bias = KeytermBias(((5, 6, 7), (5, 9), (8,)))
    assert bias.bonuses([8]) == {5: START_BONUS}
    assert bias.bonuses([5, 6, 7, 1, 5]) == {5: START_BONUS, 8: START_BONUS, 9: CONTINUE_BONUS}
    assert bias.bonuses([5, 6, 7, 5, 9, 8]) == {}


def test_second_attempts_go_to_loops_under_bias_and_uncertain_languages():
    """A biased decode dropped as a loop is tried without the bias, and a plain one that
    loops with its loop forbidden, once; a detected language under SECOND_LANGUAGE_BELOW
    in the runner-up (no draft: it is another language's text); nothing else is tried
    again, and nothing forced."""
    audio = np.zeros(16000, dtype=np.float32)
    biased = AsrRequest(audio, bias=KeytermBias(((5,),)), draft=(1, 2))
    looped = Transcription("", (), rejected="repetition")
    plain = second_attempt(biased, looped)
    assert plain == AsrRequest(audio, draft=(1, 2))
    unlooped = second_attempt(plain, looped)
    assert unlooped == AsrRequest(audio, draft=(1, 2), no_repeat=NO_REPEAT_TOKENS)
    assert second_attempt(unlooped, looped) is None
    unsure = Transcription("hallo", (1,), language="en", runner_up=("de", 0.3))
    low = SECOND_LANGUAGE_BELOW - 0.01
    tried = second_attempt(biased, replace(unsure, language_probability=low))
    assert (tried.language, tried.draft, tried.bias) == ("de", None, biased.bias)
    for result in (
        replace(unsure, language_probability=SECOND_LANGUAGE_BELOW),
        replace(unsure, language_probability=low, rejected="no_speech"),
        replace(unsure, language_probability=low, runner_up=None),
    ):
        assert second_attempt(AsrRequest(audio), result) is None
    forced = AsrRequest(audio, language="en")
    assert second_attempt(forced, replace(unsure, language_probability=low)) is None


def test_a_decode_the_model_doubts_is_drawn_again_hotter_until_likely_enough():
    """Under FALLBACK_BELOW (and not dropped), a decode is drawn again at the next of
    FALLBACK_TEMPERATURES, without its draft (a drawn token is no greedy choice), in the
    language of the decode it would replace; past the last, or once likely enough, or
    dropped, nothing more."""
    audio = np.zeros(16000, dtype=np.float32)
    doubted = Transcription("shit the thermostat", (1,), avg_logprob=FALLBACK_BELOW - 0.1)
    request = AsrRequest(audio, draft=(1, 2))
    for temperature in FALLBACK_TEMPERATURES:
        request = second_attempt(request, doubted)
        assert (request.temperature, request.draft) == (temperature, None)
    assert second_attempt(request, doubted) is None
    sure = replace(doubted, avg_logprob=FALLBACK_BELOW)
    assert second_attempt(AsrRequest(audio), sure) is None
    assert second_attempt(AsrRequest(audio), replace(doubted, rejected="no_speech")) is None
    in_runner_up = AsrRequest(audio, language="de")  # its decode lost to the first's
    assert second_attempt(in_runner_up, replace(doubted, language="en")) is None
    assert second_attempt(in_runner_up, replace(doubted, language="de")).temperature == 0.2


def test_the_better_attempt_is_the_one_not_dropped_else_the_likelier():
    first = Transcription("hello", (1,), avg_logprob=-1.0, language="en", runner_up=("de", 0.3))
    likelier = Transcription("hallo", (2,), avg_logprob=-0.5, language="de")
    assert better_attempt(first, likelier) == replace(likelier, language_probability=0.3)
    assert better_attempt(first, replace(likelier, avg_logprob=-1.5)) is first
    dropped = replace(likelier, text="", rejected="repetition")
    assert better_attempt(first, dropped) is first
    looped = replace(first, text="", avg_logprob=-0.01, rejected="repetition")
    plain_loop = replace(dropped, language="en")
    assert better_attempt(looped, plain_loop) is plain_loop
    assert better_attempt(looped, first) is first


@given(
    st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=6),
    st.lists(st.integers(0, 5), max_size=30),
)
def test_the_terms_written_are_those_the_text_holds_whole(sequences, tokens):
    bias = KeytermBias(tuple(map(tuple, sequences)))
    held = {
        i
        for i, s in enumerate(sequences)
        if any(tokens[at : at + len(s)] == s for at in range(len(tokens)))
    }
    assert bias.written(tokens) == held


def test_keyterms_are_bounded():
    """Terms are trimmed and deduplicated; too many or too long ones are refused."""
    assert check_keyterms([" Kubernetes ", "Kubernetes", "", "Post  greSQL"]) == (
        "Kubernetes",
        "Post greSQL",
    )
    with pytest.raises(ValueError, match="at most"):
        check_keyterms(f"term{i}" for i in range(MAX_KEYTERMS + 1))
    with pytest.raises(ValueError, match="characters"):
        check_keyterms(["x" * 51])


@pytest.mark.parametrize(
    "text, redacted",
    [
        ("My card number is 4111 1111 1111 1111.", "My card number is [redacted]."),
        (
            "It is four one one one, one one one one, one one one one, one one one one, ok.",
            "It is [redacted], ok.",
        ),
        ("My social is 123-45-6789 thanks", "My social is [redacted] thanks"),
        ("Call me at 555-867-5309.", "Call me at [redacted]."),
        ("Call five five five, eight six seven, five three oh nine now.", "Call [redacted] now."),
        (
            "I have one question about the 3 invoices in 2024.",
            "I have one question about the 3 invoices in 2024.",
        ),
        ("Oh, I see.", "Oh, I see."),
    ],
)
def test_card_numbers_ssns_and_phone_numbers_are_redacted_and_nothing_else(text, redacted):
    """A final's run of numbers is redacted by how many digits it holds, written as
    digits or words; other numbers and words stay."""
    assert final_text(text, ALL) == redacted


def final_text(text: str, categories: frozenset[Redact]) -> str:
    """``text`` as a final's words say it once rewritten (its words are all it has)."""
    return " ".join(rewrite(text.split(), str, lambda run, t: t, categories, numerals=False))


@pytest.mark.parametrize(
    "partial, redacted",
    [
        ("My card number is 4539 1488", "My card number is [redacted]"),
        ("My card number is four five three nine, one", "My card number is [redacted]"),
        ("My card number is 4539 1488 and", "My card number is 4539 1488 and"),
        ("It costs $20", "It costs $20"),
    ],
)
def test_a_partial_never_shows_the_first_digits_of_a_card_number(partial, redacted):
    """A partial's last run may still grow into a card number (its speaker is mid-way),
    so it is redacted while it could; a run the partial's words go on past is done, and
    is judged by its digits as a final's is. A final keeps its last number when too short."""
    pci = frozenset({Redact.PCI})
    assert rewrite_text(partial, pci, numerals=False) == redacted
    assert final_text("My card number is 4539 1488", pci) == "My card number is 4539 1488"
    ssn = frozenset({Redact.SSN})
    assert rewrite_text("It is 123 45 6789 12", ssn, numerals=False) == "It is 123 45 6789 12"


# What tiny.en wrote for espeak-ng reading "My card number is 4539 … 1488 … 0343 …
# 6467, and it expires soon." with 0.7 s pauses: four finals, none a card by itself.
READ_IN_GROUPS = [
    "My card number is 4,500,39.",
    "1,4888.",
    "0-3-4-3.",
    "6,467, and it expires soon.",
]


def chained(
    texts: list[str], categories: frozenset[Redact], gaps: list[float] | None = None
) -> list[str]:
    """``texts`` as finals say them, pushed through one ``NumberChain`` in order (each
    1 s long, the pauses between them ``gaps``: 0.7 s unless given), then the chain
    closed."""
    chain: NumberChain[int] = NumberChain(categories)
    gaps = [0.7] * len(texts) if gaps is None else gaps
    released: list[tuple[int, Carry, bool]] = []
    start = 0.0
    for i, text in enumerate(texts):
        start += 1.0 + gaps[i - 1] if i else 0.0
        released += chain.push(i, text.split(), start, start + 1.0)
    released += chain.close()
    assert [i for i, _, _ in released] == list(range(len(texts)))  # each once, in order
    return [
        " ".join(rewrite(texts[i].split(), str, lambda r, t: t, categories, False, end, carry))
        for i, carry, end in released
    ]


def test_a_number_read_out_in_groups_is_redacted_in_every_final():
    """Each final ends or begins a number that the next or the one before reads on, so
    each part is judged by the whole number's 19 digits: a card."""
    assert chained(READ_IN_GROUPS, frozenset({Redact.PCI})) == [
        f"My card number is {REDACTED}.",
        f"{REDACTED}.",
        f"{REDACTED}.",
        f"{REDACTED}, and it expires soon.",
    ]


@pytest.mark.parametrize(
    "texts, categories, gaps, said",
    [
        # a pause longer than the gap: two numbers, neither a card
        (["My code is 4539 1488.", "0343 6467 is the other."], {Redact.PCI}, [2.5], None),
        # numbers that are not read on: each final as it is
        (["I would like 2.", "Make that 3."], {Redact.PCI}, None, None),
        (["It costs $20", "30 more"], {Redact.PCI}, None, None),
        # an SSN in two groups (9 digits), and the same with card numbers only
        (["It is 123 45", "6789."], {Redact.SSN}, None, [f"It is {REDACTED}", f"{REDACTED}."]),
        (["It is 123 45", "6789."], {Redact.PCI}, None, None),
        # what tiny.en wrote for a phone number read in groups: a lone "Zero" is a digit
        (
            ["My phone number is 212. 555.", "Zero World High."],
            {Redact.PHONE},
            None,
            [f"My phone number is {REDACTED}.", f"{REDACTED} World High."],
        ),
        # and a group written with a decimal point reads the card on
        (
            ["Please charge 3 7 8 2 8 2 2 4", "631-0", "0.0530 order."],
            {Redact.PCI},
            None,
            [f"Please charge {REDACTED}", REDACTED, f"{REDACTED} order."],
        ),
        (["It is 4.5", "percent."], {Redact.PCI}, None, None),
        # a number too long for an SSN is none, whichever part would have been one
        (["It is 123 456 789", "1234."], {Redact.SSN}, None, None),
    ],
)
def test_a_number_is_judged_whole_only_when_it_is_read_on(texts, categories, gaps, said):
    assert chained(texts, frozenset(categories), gaps) == (said or texts)


@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(["4539", "one", "two", "card", "$5", "oh", "is"]), max_size=6),
            st.floats(0.0, 3 * NUMBER_GAP_S),
        ),
        max_size=12,
    ),
    st.frozensets(st.sampled_from(list(Redact))),
)
def test_a_number_chain_releases_every_text_once_in_order(texts, categories):
    """Whatever the texts, categories and pauses: each text is released exactly once, in
    order (``chained`` asserts it), and with no category nothing changes."""
    out = chained([" ".join(w) for w, _ in texts], categories, [g for _, g in texts])
    if not categories:
        assert out == [" ".join(w) for w, _ in texts]


def _unshaped_final(decoding: StreamDecoding, segment_id: int, start: float, text: str) -> Unshaped:
    words = [
        Word(w, start + 0.1 * i, start + 0.1 * (i + 1), 0.9) for i, w in enumerate(text.split())
    ]
    return Unshaped(
        Final(segment_id, start, start + 1.0, text, FinalReason.SILENCE, words), decoding
    )


def test_a_recordings_finals_are_judged_as_a_streams_are():
    """A recording's finals (all known at once): the number read on across them is
    judged whole there too; nothing waits, and their order and times stay."""
    from fake_engine import FakeEngine

    decoding = StreamDecoding.of(StreamConfig(redact=("pci",)), FakeEngine())
    finals = [
        _unshaped_final(decoding, i, 1.7 * i, t).message for i, t in enumerate(READ_IN_GROUPS)
    ]
    out = decoding.finals(finals)  # type: ignore[arg-type]
    assert [f.text for f in out] == chained(READ_IN_GROUPS, frozenset({Redact.PCI}))
    assert [(f.segment_id, f.start, f.end) for f in out] == [
        (f.segment_id, f.start, f.end) for f in finals
    ]


def test_a_final_that_may_go_on_waits_for_the_next_and_messages_keep_their_order():
    """On a stream: the final ending in "4,500,39." waits, and the messages after it
    wait with it (a partial of the next group judged as reading the number on); the
    next finals release it judged whole; a final with nothing to read on leaves at once;
    a deadline in stream time releases a final whose next group never came, and a
    partial of the next speech that begins with words releases it at once."""
    from fake_engine import FakeEngine

    decoding = StreamDecoding.of(StreamConfig(redact=("pci",)), FakeEngine())
    hold = NumberHold()
    finals = [_unshaped_final(decoding, i, 1.7 * i, t) for i, t in enumerate(READ_IN_GROUPS)]
    assert hold.take(finals[0]) == []
    assert hold.take(SpeechStarted(1, 1.7)) == []
    assert hold.take(Unshaped(Partial(1, 1.7, 2.2, "1,4888 0343 and"), decoding)) == []
    assert hold.take(finals[1]) == []  # 11 digits so far: a card may still grow
    out = hold.take(finals[2])  # 15: a card whatever follows, so they leave now
    assert [type(m).__name__ for m in out] == ["Final", "SpeechStarted", "Partial"] + ["Final"] * 2
    out += hold.take(finals[3])  # reads the card on: redacted, and nothing to wait for
    assert [m.text for m in out if not isinstance(m, SpeechStarted)] == [
        f"My card number is {REDACTED}.",
        f"{REDACTED} and",
        f"{REDACTED}.",
        f"{REDACTED}.",
        f"{REDACTED}, and it expires soon.",
    ]
    assert all(w.word[0] not in "0123456789" for m in out if isinstance(m, Final) for w in m.words)

    plain = _unshaped_final(decoding, 4, 9.0, "Thanks, that is all.")
    assert [m.text for m in hold.take(plain)] == ["Thanks, that is all."]  # type: ignore[union-attr]

    waiting = _unshaped_final(decoding, 5, 12.0, "My code is 4539 1488.")
    assert hold.take(waiting) == [] and hold.deadline is not None
    assert hold.tick(hold.deadline - 0.1) == []
    (done,) = hold.tick(hold.deadline)  # no speech followed: the number was done
    assert done.text == "My code is 4539 1488."  # type: ignore[union-attr]

    assert hold.take(_unshaped_final(decoding, 6, 20.0, "Card 4539 1488")) == []
    assert hold.take(SpeechStarted(7, 21.5)) == []
    assert hold.tick(21.0 + MAX_HOLD_S - 0.1) == []
    # speech came, its final did not: the waiting final is judged as a partial is
    unsure, started = hold.tick(21.0 + MAX_HOLD_S)
    assert unsure.text == f"Card {REDACTED}" and isinstance(started, SpeechStarted)  # type: ignore[union-attr]
    # the next speech's partial begins with words: the number was done, nothing waits
    assert hold.take(_unshaped_final(decoding, 11, 30.0, "My order is 35.")) == []
    assert hold.take(SpeechStarted(12, 31.5)) == []
    said = hold.take(Unshaped(Partial(12, 31.5, 32.5, "And I want"), decoding))
    assert [getattr(m, "text", None) for m in said] == ["My order is 35.", None, "And I want"]

    ended = SessionEnded(30.0, 8)
    assert hold.take(_unshaped_final(decoding, 8, 25.0, "It is 4539")) == []
    assert [type(m).__name__ for m in hold.take(ended)] == ["Final", "SessionEnded"]

    # a cue ends a final: nothing waits, and the next group's partial is the date
    cue = _unshaped_final(decoding, 9, 40.0, "The card is fine and it expires")
    assert [m.text for m in hold.take(cue)] == ["The card is fine and it expires"]  # type: ignore[union-attr]
    (date,) = hold.take(Unshaped(Partial(10, 41.5, 42.5, "09/27 and"), decoding))
    assert date.text == f"{REDACTED} and"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text, redacted",
    [
        ("It expires 09/27.", f"It expires {REDACTED}."),
        ("The expiry date is oh nine twenty seven.", f"The expiry date is {REDACTED}."),
        ("Valid thru September 2027, thanks.", f"Valid thru {REDACTED}, thanks."),
        ("The CVV is 412.", f"The CVV is {REDACTED}."),
        (
            "The security code on the back is four one two.",
            f"The security code on the back is {REDACTED}.",
        ),
        ("C.V.V. 4 1 2", f"C.V.V. {REDACTED}"),
        # no cue, or a number out of a cue's reach: judged by digits only
        ("We moved it to 09/27.", "We moved it to 09/27."),
        (
            "It expires soon, so call me in the next few days at 5.",
            "It expires soon, so call me in the next few days at 5.",
        ),
        ("The code is 412.", "The code is 412."),
    ],
)
def test_pci_takes_a_cards_expiry_date_and_security_code_by_the_words_before_them(text, redacted):
    """As Deepgram's pci: a number an expiry or security-code cue names is redacted,
    however few its digits; the same digits without a cue are not (nor with ssn)."""
    assert final_text(text, frozenset({Redact.PCI})) == redacted
    assert final_text(text, frozenset({Redact.SSN})) == text


def test_a_cue_at_the_end_of_a_final_reaches_into_the_next():
    """ "… and it expires" | "09/27." (a pause ended the segment after the cue): the next
    final's first run is the date; a final far later, or after a run, is not cued."""
    pci = frozenset({Redact.PCI})
    assert chained(["The card is fine and it expires", "09/27."], pci) == [
        "The card is fine and it expires",
        f"{REDACTED}.",
    ]
    texts = ["The card is fine and it expires", "09/27."]
    assert chained(texts, pci, [NUMBER_GAP_S + 0.5]) == texts
    assert chained(["The CVV is 412.", "Then 7 more."], pci)[1] == "Then 7 more."
    # a date a cue names, read on after a pause, is the date still
    assert chained(["It expires 0 9", "2 7."], pci) == [f"It expires {REDACTED}", f"{REDACTED}."]


stream_events = st.lists(
    st.tuples(
        st.sampled_from(["final", "partial", "speech", "tick", "finalized"]),
        st.lists(
            st.sampled_from(["4539", "one", "card", "expires", "CVV", "is", "$5"]), max_size=5
        ),
        st.floats(0.0, 4.0),  # seconds after the event before it
    ),
    max_size=30,
)


def _stream_message(kind: str, n: int, now: float, text: str, decoding: StreamDecoding):
    if kind == "final":
        return _unshaped_final(decoding, n, now, text)
    if kind == "partial":
        return Unshaped(Partial(n, now, now + 0.5, text), decoding)
    return SpeechStarted(n, now) if kind == "speech" else Finalized(now)


@given(
    stream_events,
    st.frozensets(st.sampled_from(list(Redact))),
    st.sampled_from(["My card is 4539", "It expires", "Thanks."]),
)
def test_every_message_leaves_once_in_order_whatever_waits(events, categories, last):
    """A stream's messages through ``NumberHold`` in any order of finals, partials,
    speech starts, ticks and ``finalized``: each leaves exactly once, in the order it
    came, and nothing is left once the session ends."""
    from fake_engine import FakeEngine

    decoding = StreamDecoding.of(
        StreamConfig(redact=tuple(c.value for c in categories)), FakeEngine()
    )
    hold, came, left, now = NumberHold(), [], [], 0.0
    for n, (kind, words, after) in enumerate(events):
        now += after
        if kind == "tick":
            left += hold.tick(now)
            continue
        came.append((kind, n))
        left += hold.take(_stream_message(kind, n, now, " ".join(words), decoding))
    came.append(("final", len(events)))  # the last words, which may be a number to wait on
    left += hold.take(_stream_message("final", len(events), now + 0.5, last, decoding))
    left += hold.take(SessionEnded(now + 1.5, len(events) + 1))
    kinds = {
        "final": "final",
        "partial": "partial",
        "speech_started": "speech",
        "finalized": "finalized",
    }
    assert [(kinds[m.type], getattr(m, "segment_id", None)) for m in left[:-1]] == [
        (kind, n if kind != "finalized" else None) for kind, n in came
    ]
    assert left[-1].type == "session_ended" and hold.deadline is None


def test_numbers_redacts_every_number_and_numerals_writes_digits():
    """``numbers`` takes every run; ``numerals`` writes number words as digits."""
    assert (
        rewrite_text("I have one question about 3 invoices.", frozenset({Redact.NUMBERS}), False)
        == "I have [redacted] question about [redacted] invoices."
    )
    assert (
        rewrite_text("twenty one people came at ten", frozenset(), True) == "21 people came at 10"
    )


words_or_numbers = st.lists(
    st.one_of(
        st.sampled_from(["one", "two", "oh", "nine", "4111", "555-0123", "twenty", "hundred"]),
        st.sampled_from(["card", "is", "my", "the", "Oh,", "call", "thanks."]),
    ),
    max_size=40,
)


@given(words_or_numbers, st.frozensets(st.sampled_from(list(Redact))))
def test_redaction_keeps_every_word_it_does_not_redact_in_order(words, categories):
    """Rewriting keeps each word outside a redacted run, in order; a redacted run is
    one word; times of a run span its first word to its last."""
    timed = [(w, float(i), i + 0.5) for i, w in enumerate(words)]
    out = rewrite(
        timed, lambda w: w[0], lambda run, t: (t, run[0][1], run[-1][2]), categories, numerals=False
    )
    kept = [w for w in out if not w[0].startswith(REDACTED)]
    assert [w for w in timed if w in kept] == kept
    assert [w[1] for w in out] == sorted(w[1] for w in out)
    if not categories:
        assert out == timed
    for run in number_runs(words):
        if Redact.NUMBERS in categories:
            assert not any(timed[i] in out for i in range(*run))


UNSURE, SURE = RESPELL_UNSURE / 2, (1 + RESPELL_UNSURE) / 2


def said(text: str, unsure: set[int] = frozenset()) -> list[tuple[str, float]]:
    """``text``'s words, the model unsure of those at ``unsure`` (all, if not given)."""
    words = text.split()
    return [(w, UNSURE if not unsure or i in unsure else SURE) for i, w in enumerate(words)]


@pytest.mark.parametrize(
    "text, terms, runs",
    [
        # what tiny.en wrote for espeak-ng's voice (bench/vocabulary.py's set)
        ("run the migration with a limbic tonight.", ["Alembic"], [(4, 6, "Alembic")]),
        ("Dr Okonk where reviewed the scans", ["Okonkwo", "Zendesk"], [(1, 2, "Okonkwo")]),
        ("with have or send joins the board", ["Halvorsen"], [(1, 4, "Halvorsen")]),
        ("Move the files to the next cloud share.", ["Nextcloud"], [(5, 7, "Nextcloud")]),
        # nothing like any term; a term already written; an inflection of a term
        ("Tell the team the demo moved.", ["Joaquin", "Thiago"], []),
        ("Restart the Kubernetes cluster.", ["Kubernetes"], []),
        ("We moved the Terraforms over.", ["Terraform"], []),
        # one run, two terms alike: the more alike takes it; a term is written once
        ("the nextcloud and next cloud", ["Nextcloud"], []),
        ("a limbic or a limbic", ["Alembic"], [(0, 2, "Alembic")]),
    ],
)
def test_runs_spelled_like_a_term_are_respelled(text, terms, runs):
    assert respellings(said(text), terms) == runs


def test_only_words_the_model_was_unsure_of_are_respelled():
    """ "motion" said clearly stays "motion" whatever the glossary holds; unsure, it is
    the term; a run respelled needs one unsure word, not all."""
    assert respellings(said("the motion passed", unsure={0, 2}), ["Notion"]) == []
    assert respellings(said("the motion passed", unsure={1}), ["Notion"]) == [(1, 2, "Notion")]
    assert respellings(said("with a limbic", unsure={2}), ["Alembic"]) == [(1, 3, "Alembic")]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "limbic", "next", "cloud", "the", "Okonk", "Zen", "desk."]),
            st.floats(0, 1),
        ),
        max_size=20,
    ),
    st.lists(st.sampled_from(["Alembic", "Nextcloud", "Okonkwo", "Zendesk"]), max_size=4),
)
def test_respelled_runs_never_overlap_and_each_term_is_written_once(words, terms):
    """So too where the model heard every run it was asked about as its term; and it is
    asked only about runs too unlike a term to respell on their letters, the most alike
    first, each with a word it was unsure of."""
    asked = to_ask(words, terms)
    assert len(asked) <= ASKED_RUNS
    assert all(ASK_SIMILARITY <= run.alike < RESPELL_SIMILARITY for run in asked)
    assert [run.alike for run in asked] == sorted((run.alike for run in asked), reverse=True)
    for heard in ((), [(run.letters, run.term) for run in asked]):
        runs = respellings(words, terms, heard)
        covered = [i for start, end, _ in runs for i in range(start, end)]
        assert len(covered) == len(set(covered))
        assert len({term for _, _, term in runs}) == len(runs)
        assert all(any(p < RESPELL_UNSURE for _, p in words[a:b]) for a, b, _ in runs)
        for start, end, term in respellings(words, terms):  # what the letters respell stays,
            took = [t for a, b, t in runs if t == term or (a < end and start < b)]
            assert took  # itself, or a run the model heard in its place


def test_a_run_unlike_its_term_is_respelled_only_where_the_model_heard_it():
    """tiny.en writes "to Nguyen in accounting" as "to be an accounting": "be an" is too
    unlike "Nguyen" to respell on its letters, so it is asked about, and written as the
    term only where the model heard it so; a run heard as another term, or not asked
    about, changes nothing."""
    words = said("Send the invoice to be an accounting.", unsure={4, 5, 6})
    alike = 40.0  # rapidfuzz's ratio of "bean" and "nguyen"
    assert to_ask(words, ["Nguyen"]) == [Respelling(4, 6, "Nguyen", alike, "bean")]
    assert respellings(words, ["Nguyen"]) == []
    assert respellings(words, ["Nguyen"], [("bean", "Nguyen")]) == [(4, 6, "Nguyen")]
    assert respellings(words, ["Nguyen"], [("bean", "Okonkwo"), ("invoice", "Nguyen")]) == []


def test_a_run_the_model_heard_as_a_term_goes_before_one_spelled_like_another():
    """tiny.en writes "Check the Grafana dashboard" as "Check the Ramanash Lord": its
    letters respell Ramanathan, but the model, asked, hears Grafana there."""
    words = said("Check the Ramanash Lord for the latency spike.", unsure={2, 3})
    terms = ["Ramanathan", "Grafana"]
    assert respellings(words, terms) == [(2, 3, "Ramanathan")]
    assert respellings(words, terms, [("ramanash", "Grafana")]) == [(2, 3, "Grafana")]


def test_a_run_asked_about_is_read_with_its_term_in_its_place():
    texts = ["She", "won't", "present", "the", "numbers."]
    assert written_as(texts, Respelling(0, 2, "Siobhan", 50.0, "shewont")) == (
        "Siobhan present the numbers."
    )
    assert written_as(texts, Respelling(4, 5, "Nagios", 50.0, "numbers")) == (
        "She won't present the Nagios."
    )


def test_a_stream_with_keyterms_gets_respelled_words_with_their_times():
    """The run's words become one, timed from its first to its last, its probability
    the least sure; the trailing punctuation stays; the text is the words'."""
    from fake_engine import FakeEngine
    from parley.workers.decoding import StreamDecoding

    decoding = StreamDecoding.of(StreamConfig(keyterms=("Alembic",)), FakeEngine())
    words = [
        Word("with", 0.0, 0.2, 0.9),
        Word("a", 0.2, 0.3, 0.4),
        Word("limbic.", 0.3, 0.8, 0.5),
    ]
    out = decoding.respelled(words)
    assert out == [Word("with", 0.0, 0.2, 0.9), Word("Alembic.", 0.2, 0.8, 0.4)]
    assert decoding.text("with a limbic.", out) == "with Alembic."
    plain = StreamDecoding.of(StreamConfig(), FakeEngine())
    assert (
        plain.respelled(words) == words and plain.text("with a limbic.", words) == "with a limbic."
    )


def test_decoding_settings_from_the_query():
    """languages, task, keyterms, prompt, redact, numerals, replace and filler_words parse
    as section 1 says and round-trip through the query; their errors are bad_config."""
    config = StreamConfig.from_query(
        {
            "languages": "en, ES,fr-FR",
            "task": "translate",
            "keyterms": "Kubernetes,PostgreSQL",
            "prompt": "Hi.",
            "redact": "ssn,pci",
            "numerals": "true",
            "language": "auto",
            "replace": "Monika:Monica, new  year:Nguyen",
            "filler_words": "true",
        }
    )
    assert config.replace == ("monika:Monica", "new year:Nguyen")
    languages, terms = frozenset({"en", "es", "fr"}), ("Kubernetes", "PostgreSQL")
    # filler_words puts the filler prompt after the caller's own
    assert config.decoding == Decoding(None, languages, Task.TRANSLATE, terms, with_fillers("Hi."))
    assert with_fillers("Hi.").startswith("Hi. ") and "um" in with_fillers("").lower().split(", ")
    assert replace(config, filler_words=False).decoding.prompt == "Hi."
    assert config.redaction == {Redact.PCI, Redact.SSN} and config.numerals
    assert StreamConfig.from_query(config.to_query()) == config
    # A default config's URL names none of them: servers that predate them accept it.
    assert not set(StreamConfig().to_query()) & {
        "languages",
        "task",
        "keyterms",
        "prompt",
        "redact",
        "numerals",
        "replace",
        "filler_words",
    }
    for params, fragment in [
        ({"replace": "monika"}, "find:replacement"),
        ({"task": "summarise"}, "transcribe or translate"),
        ({"redact": "email"}, "redact takes"),
        ({"languages": "en,english"}, "2 or 3 letter"),
        ({"keyterms": ",".join(f"t{i}" for i in range(101))}, "at most"),
        ({"prompt": "x" * 1001}, "at most 1000"),
    ]:
        with pytest.raises(ProtocolError) as caught:
            StreamConfig.from_query(params)
        assert caught.value.code is ErrorCode.BAD_CONFIG and fragment in caught.value.message


def test_an_english_only_model_refuses_other_languages_and_translation():
    """The one rule both engines apply."""
    known = frozenset({"en", "es"})
    assert decoding_problem(Decoding(language="en"), "tiny.en", False, known) is None
    assert "English-only" in decoding_problem(
        Decoding(languages=frozenset({"es"})), "tiny.en", False, known
    )
    assert "translate" in decoding_problem(Decoding(task=Task.TRANSLATE), "tiny.en", False, known)
    assert decoding_problem(Decoding(task=Task.TRANSLATE), "base", True, known) is None
    assert "'xx'" in decoding_problem(Decoding(language="xx"), "base", True, known)
