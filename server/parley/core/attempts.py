"""A request decoded again: when a decode is worth another (``second_attempt``), which of
two decodes of the same audio is kept (``better_attempt``), and a request decoded alone
with its attempts (``transcribe``). The scheduler's rounds make the same attempts
(``workers.decode_rounds``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parley.core.asr import AsrRequest, Transcriber, Transcription

# A detected language less probable than this gets a second look: the segment is decoded
# in the runner-up language too, and the likelier text is kept (bench/vocabulary.py,
# base: on espeak-ng's six languages 0.78 → 0.83 right, on real speakers' five 0.94 →
# 0.97; the same from 0.6 to 0.9 on both sets).
SECOND_LANGUAGE_BELOW = 0.7

# A decode that looped is decoded again with no run of this many tokens written twice
# (transformers' ``no_repeat_ngram_size``): four lets a word be said four times over
# ("no, no, no, no") and stops a phrase's second time round within its first words.
NO_REPEAT_TOKENS = 4

# A decode over a short window that ran on past its audio is decoded again over the clip
# and this much padding before the whole window is tried: over 102 clips of 3.3 s
# (bench/windows.py, tiny.en) 15 % ran on with 3 s of padding, 2 % with 6 s and none
# with 10 s, and a 1 s clip's pass over 11 s costs a third of the whole window's.
RETRY_MARGIN_S = 10.0

# A decode whose mean token log-probability is under this is drawn again at a
# temperature, each of these in turn until one is not, and the likeliest kept: Whisper's
# own fallback (its ``logprob_threshold``; faster-whisper decodes with it by default).
# On 24 spoken commands (bench/voice_commands.py, tiny.en) greedy decoding wrote WER 0.31
# in Parley and faster-whisper alike, faster-whisper's fallback 0.25. Here 0.2 alone gave
# 0.29, 0.2 then 0.4 0.27 in 32 decodes, and Whisper's 0.2 to 1.0 the same 0.27 in 44.
FALLBACK_BELOW = -1.0
FALLBACK_TEMPERATURES = (0.2, 0.4)


def second_attempt(request: AsrRequest, result: Transcription) -> AsrRequest | None:
    """What to decode again after ``result``, or None (``better_attempt`` then keeps one).
    Each kind of attempt is made once (the last once a temperature); an attempt may need
    another of a later kind:

    - a decode over a short window that ran on past its audio, over a wider window
      (``RETRY_MARGIN_S``), and if that ran on too, over the whole window;
    - a keyterm-biased decode dropped as a repetition loop (the bias may have made it: a
      term written, then another, over and over), without the bias: a caller's keyterms
      never cost it a final;
    - a decode dropped as a repetition loop, with its loop forbidden
      (``NO_REPEAT_TOKENS``): what the model reads without looping, not an empty final
      (base translating espeak-ng's Spanish "La reunión empieza mañana..." wrote "The
      Indian and the Indian and ..." until the decoder was full);
    - a decode whose detected language was uncertain, in the runner-up language;
    - a decode the model found unlikely (``FALLBACK_BELOW``), drawn again at each of
      ``FALLBACK_TEMPERATURES`` in turn until one is likely enough, as Whisper's own
      decoding falls back."""
    if result.window_too_short and not request.whole_window:
        if request.margin_s < RETRY_MARGIN_S:
            return replace(request, margin_s=RETRY_MARGIN_S)
        return replace(request, whole_window=True)
    if result.rejected == "repetition":
        if request.bias is not None:
            return replace(request, bias=None)
        if not request.no_repeat:
            return replace(request, no_repeat=NO_REPEAT_TOKENS)
    uncertain = result.language_probability is not None and (
        result.language_probability < SECOND_LANGUAGE_BELOW
    )
    if request.language is None and uncertain and result.runner_up and not result.rejected:
        return replace(request, language=result.runner_up[0], draft=None)
    # Drawn in the language of the decode it would replace: not in a runner-up language
    # whose own decode was not kept.
    same_language = request.language is None or request.language == result.language
    if result.rejected is None and result.avg_logprob < FALLBACK_BELOW and same_language:
        hotter = [t for t in FALLBACK_TEMPERATURES if t > request.temperature]
        if hotter:
            return replace(request, temperature=hotter[0], draft=None)
    return None


def better_attempt(first: Transcription, second: Transcription) -> Transcription:
    """Of two decodes of the same audio, the one kept: text that was not dropped, else the
    likelier (higher mean log-probability); the second where both were dropped (a loop
    is confident: the unbiased decode is what plain decoding gives); the whole window's
    over a short one that ran on. A second attempt in the runner-up language keeps the
    probability detection gave that language."""
    if first.window_too_short:
        return second
    if first.rejected is None and second.rejected is None:
        chosen = second if second.avg_logprob > first.avg_logprob else first
    else:
        chosen = first if second.rejected and first.rejected is None else second
    if chosen is second and first.runner_up and second.language == first.runner_up[0]:
        return replace(second, language_probability=first.runner_up[1])
    return chosen


def transcribe(
    engine: Transcriber[Any], request: AsrRequest, budget: int | None = None
) -> Transcription:
    """One request decoded alone, start to finish (tests, benchmarks, warm-up), with its
    ``second_attempt``s where there are any."""
    result = _decode_alone(engine, request, budget)
    while (again := second_attempt(request, result)) is not None:
        request, result = again, better_attempt(result, _decode_alone(engine, again, budget))
    return result


def _decode_alone(
    engine: Transcriber[Any], request: AsrRequest, budget: int | None
) -> Transcription:
    (decode,) = engine.start([request])
    budget = engine.max_draft if budget is None else budget
    try:
        while not decode.finished:
            engine.step([decode], [budget])
    except BaseException:
        engine.drop(decode)
        raise
    return engine.finish(decode)
