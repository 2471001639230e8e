"""Whisper through transformers, as a ``core.asr.Transcriber``: many decodes at once.

``start`` runs one batched encoder pass over newly admitted clips and gives each a
row of the decoder (``row_decoder``); ``step`` advances rows together through
``GreedyVerifier``, each verifying its own draft (the previous hypothesis of its
segment, or an optional assistant model), so every text is exactly the main model's
greedy text. On CUDA the decoder's passes replay captured graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoConfig, WhisperForConditionalGeneration, WhisperProcessor
from transformers.utils import logging as hf_logging

from parley.core.asr import (
    MAX_DRAFT,
    MAX_ROWS,
    AsrRequest,
    Decoding,
    StepReport,
    Task,
    Transcription,
    Vocabulary,
    decoding_problem,
)
from parley.core.attempts import transcribe
from parley.core.audio import SAMPLE_RATE, WHISPER_WINDOW_S
from parley.core.keyterms import KeytermBias
from parley.core.quality import QualityGuards, compression_ratio, ends_repeating, repeats_itself
from parley.core.words import TimedWord
from parley.models.alignment import word_timings
from parley.models.assistant import Assistant, load_assistant
from parley.models.device import DevicePlan
from parley.models.drafters import AssistantDrafter, ChainedDrafter, Drafter, HypothesisDrafter
from parley.models.encoder import SAMPLES_PER_POSITION, encode, pass_frames, token_bound
from parley.models.greedy import GreedyVerifier, RowDecode, sampler
from parley.models.keyterm_check import heard_keyterms
from parley.models.language_id import detect_languages
from parley.models.output_head import OutputHead
from parley.models.row_decoder import Row, RowDecoder

log = logging.getLogger(__name__)
MAX_PROMPT_TOKENS = 223  # Whisper takes at most half its 448 positions as prompt


@dataclass(eq=False)
class WhisperDecode:
    """One request in flight on the engine (a ``core.asr.Decode``)."""

    request: AsrRequest
    main: RowDecode
    assistant_row: Row | None = None
    language: str = "en"
    language_probability: float | None = None  # when it was detected
    runner_up: tuple[str, float] | None = None  # the second language detection gave
    short_window: bool = False  # its encoder pass read less than the whole 30 s window
    looped: bool = False  # ended early, in a loop past what its audio could say

    @property
    def finished(self) -> bool:
        return self.main.finished

    @property
    def drafting(self) -> bool:
        return self.main.drafting


class WhisperEngine:
    """Loads a Whisper model (bundle directory, local path or hub id) and decodes with it."""

    def __init__(
        self,
        source: str,
        label: str,
        plan: DevicePlan,
        *,
        assistant_source: str | None = None,
        assistant_label: str | None = None,
        assistant_languages: frozenset[str] | None = None,
        guards: QualityGuards | None = QualityGuards(),
        max_draft: int = MAX_DRAFT,
        max_rows: int = MAX_ROWS,
        cuda_graphs: bool = True,
        window_margin_s: float | None = None,
    ):
        hf_logging.set_verbosity_error()  # transformers' deprecation chatter is not ours to show
        self.label = label
        self.plan = plan
        self.guards = guards
        self.max_draft = max_draft
        self.max_rows = max_rows
        self.max_audio_s = WHISPER_WINDOW_S
        self.max_prompt_tokens = MAX_PROMPT_TOKENS
        self.graphs = cuda_graphs and plan.device.type == "cuda"
        # Encoder passes over the audio and this much padding, not the whole window
        # (models/encoder.py); captured graphs read whole windows only.
        self.window_margin_s = None if self.graphs else window_margin_s
        self.processor = WhisperProcessor.from_pretrained(source)
        tokenizer = self.processor.tokenizer
        self.assistant: Assistant | None = None
        if assistant_source is not None:  # checked before the main weights load: fail fast
            self.assistant = load_assistant(
                assistant_source,
                assistant_label or assistant_source,
                AutoConfig.from_pretrained(source),
                tokenizer,
                plan,
                assistant_languages,
            )
        self.model = plan.place(
            WhisperForConditionalGeneration.from_pretrained(
                source, dtype=plan.dtype, attn_implementation="sdpa"
            )
        )
        generation = self.model.generation_config
        self.multilingual = bool(getattr(generation, "is_multilingual", False))
        self.languages = (
            frozenset(token[2:-2] for token in getattr(generation, "lang_to_id", {}) or {})
            if self.multilingual
            else frozenset({"en"})
        )
        self._eot = generation.eos_token_id
        self._sot = generation.decoder_start_token_id
        self._prev = tokenizer.convert_tokens_to_ids("<|startofprev|>")
        # The widest step is the last accepted token plus a full draft.
        self.decoder = RowDecoder(
            self.model.model.decoder, capacity=max_rows, max_width=max_draft + 1, graphs=self.graphs
        )
        self.verifier = GreedyVerifier(
            self.decoder,
            OutputHead(self.model.proj_out, int8=plan.int8_head),
            generation.suppress_tokens or [],
            generation.begin_suppress_tokens or [],
            self._eot,
            generation.no_timestamps_token_id - 1,
            self.model.config.vocab_size,
            plan.device,
        )
        self._alignment_heads = [tuple(pair) for pair in generation.alignment_heads]
        self._token_text = lambda token: tokenizer.decode([token])
        self._encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
        if self.assistant is not None:
            if self.assistant.share_encoder(self.model.model.encoder):
                log.info("assistant %s reads the main model's encoder output", self.assistant.label)
            self._assistant_decoder = RowDecoder(
                self.assistant.decoder,
                capacity=max_rows,
                max_width=max_draft + 1,
                graphs=self.graphs,
            )
            self._assistant_head = OutputHead(self.assistant.proj_out, int8=plan.int8_head)

    # ------------------------------------------------------------------ languages

    def check_language(self, language: str | None) -> None:
        """Raise ValueError when this model cannot transcribe ``language``."""
        self.check_decoding(Decoding(language=language))

    def check_decoding(self, decoding: Decoding) -> None:
        """Raise ValueError when this model cannot do what ``decoding`` asks."""
        problem = decoding_problem(decoding, self.label, self.multilingual, self.languages)
        if problem:
            raise ValueError(problem)

    def prompt_tokens(self, text: str) -> tuple[int, ...]:
        """``text`` as prompt tokens: its last MAX_PROMPT_TOKENS, as openai-whisper keeps."""
        tokens = self._encode(" " + text.strip())
        return tuple(tokens[-MAX_PROMPT_TOKENS:]) if text.strip() else ()

    def vocabulary(self, decoding: Decoding) -> Vocabulary:
        """The prompt as prompt tokens, and the keyterms' trie (each term as it is written
        after a space, as it is written mid-sentence)."""
        terms = decoding.keyterms
        sequences = [tuple(self._encode(" " + t)) for t in terms]
        bias = KeytermBias.of(sequences, self.processor.tokenizer.decode, terms) if terms else None
        return Vocabulary(self.prompt_tokens(decoding.prompt), bias)

    def sot_sequence(self, language: str | None, task: Task = Task.TRANSCRIBE) -> list[int]:
        tokenizer = self.processor.tokenizer
        sequence = [self._sot]
        if self.multilingual:
            sequence += tokenizer.convert_tokens_to_ids([f"<|{language}|>", f"<|{task.value}|>"])
        sequence.append(self.model.generation_config.no_timestamps_token_id)
        return sequence

    def features(self, audio: np.ndarray, frames: int | None = None) -> torch.Tensor:
        """The log-mel of the first ``frames`` encoder positions (None: a whole window)."""
        seconds = len(audio) / SAMPLE_RATE
        if seconds > WHISPER_WINDOW_S:
            raise ValueError(f"{seconds:.1f} s of audio; Whisper takes at most 30 s at once")
        samples = (frames or self.decoder.frames) * SAMPLES_PER_POSITION
        return self.processor.feature_extractor(
            audio, sampling_rate=SAMPLE_RATE, return_tensors="pt", max_length=samples
        ).input_features.to(self.plan.device, self.plan.dtype)

    # ------------------------------------------------------------------ Transcriber

    @torch.inference_mode()
    def start(self, requests: Sequence[AsrRequest]) -> list[WhisperDecode]:
        """One encoder pass over the requests' audio, then their prompts in one pass."""
        for request in requests:
            self.check_decoding(Decoding(request.language, request.languages, request.task))
        full = self.decoder.frames
        frames = pass_frames(requests, self.window_margin_s, full)
        features = torch.cat([self.features(r.audio, frames) for r in requests])
        # The encoder runs once; language detection, decoding and alignment share it.
        encoder_hidden = encode(self.model.model.encoder, features, frames)
        rows = self.decoder.add(encoder_hidden)
        decodes: list[WhisperDecode] = []
        assistant_rows: list[Row] = []
        try:
            known = self.model.generation_config.lang_to_id if self.multilingual else {}
            languages = detect_languages(
                requests, rows, self.decoder, self.verifier.head, known, self._sot
            )
            for i, (request, row, (language, probability, runner_up)) in enumerate(
                zip(requests, rows, languages)
            ):
                prefix = [self._prev, *request.context] if request.context else []
                prompt = prefix + self.sot_sequence(language, request.task)
                drafter, assistant_row = self._drafter(
                    request, language, features[i : i + 1], encoder_hidden[i : i + 1]
                )
                if assistant_row is not None:
                    assistant_rows.append(assistant_row)
                room = self.decoder.max_positions - len(prompt)
                if frames < full:
                    room = min(room, token_bound(request.seconds))
                main = RowDecode(row, prompt, len(prefix), room, drafter, bias=request.bias)
                main.no_repeat = request.no_repeat
                if request.temperature > 0:
                    main.temperature, main.sampler = request.temperature, sampler(self.plan.device)
                found = (language or "en", probability, runner_up, frames < full)
                decodes.append(WhisperDecode(request, main, assistant_row, *found))
            self.verifier.prime([d.main for d in decodes])
        except BaseException:
            for row in rows:
                self.decoder.release(row)
            for row in assistant_rows:
                self._assistant_decoder.release(row)
            raise
        return decodes

    def step(self, decodes: Sequence[WhisperDecode], budgets: Sequence[int]) -> list[StepReport]:
        reports = self.verifier.step([d.main for d in decodes], budgets)
        for d in decodes:  # a loop ends when it shows, not when the decoder is full
            tokens = d.main.tokens
            past = len(tokens) > token_bound(d.request.seconds)  # more than its audio says
            if d.short_window and ends_repeating(tokens):
                d.main.room = len(tokens)
            elif self.guards and past and ends_repeating(tokens):  # base's ran 444 passes
                d.looped, d.main.room = True, len(tokens)
        return reports

    @torch.inference_mode()
    def finish(self, decode: WhisperDecode) -> Transcription:
        """The result of a finished decode: text, quality guards, word timings."""
        main, request = decode.main, decode.request
        tokens = main.tokens
        text = self.processor.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        compression = compression_ratio(text)
        rejected = self.guards and self.guards.rejects(
            main.no_speech_prob, main.avg_logprob, compression, len(tokens), text
        )
        rejected = rejected or ("repetition" if decode.looped else None)  # before gzip tells
        ran_on = decode.short_window and (
            rejected == "repetition" or len(tokens) >= main.room or repeats_itself(text)
        )
        words: tuple[TimedWord, ...] = ()
        heard: tuple[tuple[str, str], ...] = ()
        try:
            if rejected or ran_on:
                text = ""
            elif request.with_words and tokens:
                words, heard = self._words(main, request)
        finally:
            self.drop(decode)
        return Transcription(
            text=text,
            tokens=tuple(tokens),
            words=words,
            no_speech_prob=main.no_speech_prob,
            avg_logprob=main.avg_logprob,
            rejected=rejected,
            stats=main.stats,
            language=decode.language,
            language_probability=decode.language_probability,
            runner_up=decode.runner_up,
            compression_ratio=compression,
            foreign=bool(
                text
                and self.guards
                and not self.multilingual
                and self.guards.foreign(main.avg_logprob, main.no_speech_prob)
            ),
            window_too_short=ran_on,
            heard_keyterms=heard,
            temperature=request.temperature,
        )

    def drop(self, decode: WhisperDecode) -> None:
        self.decoder.release(decode.main.row)
        if decode.assistant_row is not None:
            self._assistant_decoder.release(decode.assistant_row)

    def transcribe(
        self, audio: np.ndarray, *, budget: int | None = None, **options
    ) -> Transcription:
        """One clip decoded alone (tests and benchmarks); ``budget`` 0 means no drafts;
        ``options``: ``AsrRequest``'s fields (language, with_words, draft, bias, …)."""
        return transcribe(self, AsrRequest(audio, **options), budget)

    # ------------------------------------------------------------------ internals

    def _words(
        self, main: RowDecode, request: AsrRequest
    ) -> tuple[tuple[TimedWord, ...], tuple[tuple[str, str], ...]]:
        """A final's words with their times, and the runs the model hears as keyterms."""
        heads, eot, seconds = self._alignment_heads, self._eot, request.seconds
        words = word_timings(self.decoder, main, heads, eot, self._token_text, seconds)
        if not (request.bias and request.bias.terms):
            return words, ()
        terms, head = request.bias.terms, self.verifier.head
        return words, heard_keyterms(
            main.row, main.prompt, words, terms, self._encode, head, eot, self._prev
        )

    def _drafter(
        self, request: AsrRequest, language: str | None, mel: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[Drafter | None, Row | None]:
        hypothesis = HypothesisDrafter(request.draft) if request.draft else None
        assistant, row = None, None
        # The assistants (distil-whisper) learnt to transcribe, not to translate.
        if (
            self.assistant is not None
            and request.task is Task.TRANSCRIBE
            and self.assistant.serves(language)
        ):
            (row,) = self._assistant_decoder.add(self.assistant.encode(mel, hidden))
            head, suppress = self._assistant_head, self.verifier.suppress
            assistant = AssistantDrafter(row, head, suppress, self._eot, max_length=self.max_draft)
        if hypothesis and assistant:
            return ChainedDrafter(hypothesis, assistant), row
        return hypothesis or assistant, row
