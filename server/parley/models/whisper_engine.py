"""Whisper through transformers: one engine owns one loaded model (and runs on one thread).

Decoding is greedy at batch size one through ``GreedyVerifier``: drafts from the
previous hypothesis of the same segment and from an optional assistant model are
verified by the main model, so the text is exactly the main model's greedy text.
Both decoders run on a static cache by default (CUDA graphs on GPU, see
``static_decoder``); ``cache="dynamic"`` uses transformers' own cache instead.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration, WhisperProcessor
from transformers.utils import logging as hf_logging

from parley.core.words import TimedWord, group_words
from parley.models.alignment import forced_pass
from parley.models.assistant import Assistant, load_assistant
from parley.models.decoder_state import Decoder, DynamicDecoder, OutputHead
from parley.models.device import DevicePlan
from parley.models.drafters import AssistantDrafter, ChainedDrafter, HypothesisDrafter
from parley.models.greedy import DecodeStats, GreedyVerifier
from parley.models.static_decoder import StaticDecoder

log = logging.getLogger(__name__)
SAMPLE_RATE = 16000
MAX_AUDIO_SECONDS = 30.0


@dataclass(frozen=True)
class QualityGuards:
    """openai/whisper's rules for text that is not speech (its thresholds), plus one.

    openai keeps a confident decode even when the no-speech probability is high; that
    is how silence becomes " you" or "Thank you.". A no-speech probability above
    ``certain_no_speech`` drops the text however confident the decode.
    """

    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    certain_no_speech: float = 0.9

    def rejects(self, no_speech_prob: float, avg_logprob: float, compression: float) -> str | None:
        if no_speech_prob > self.certain_no_speech or (
                no_speech_prob > self.no_speech_threshold
                and avg_logprob < self.logprob_threshold):
            return "no_speech"
        if compression > self.compression_ratio_threshold:
            return "repetition"
        return None


@dataclass(frozen=True)
class Transcription:
    text: str
    tokens: tuple[int, ...]
    words: tuple[TimedWord, ...] = ()  # times relative to the audio start
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    rejected: str | None = None       # why the text was dropped, if it was
    stats: DecodeStats = field(default_factory=DecodeStats)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(gzip.compress(data)) if data else 0.0


class WhisperEngine:
    """Loads a Whisper model (bundle directory, local path or hub id) and transcribes audio."""

    def __init__(self, source: str, label: str, plan: DevicePlan, *,
                 assistant_source: str | None = None, assistant_label: str | None = None,
                 assistant_languages: frozenset[str] | None = None,
                 guards: QualityGuards | None = QualityGuards(), max_draft: int = 15,
                 cache: str = "static", cuda_graphs: bool = True):
        hf_logging.set_verbosity_error()  # transformers' deprecation chatter is not ours to show
        if cache not in ("static", "dynamic"):
            raise ValueError(f"cache must be static or dynamic, not {cache!r}")
        self.label = label
        self.plan = plan
        self.guards = guards
        self.cache = cache
        self._max_draft = max_draft
        self.graphs = cache == "static" and cuda_graphs and plan.device.type == "cuda"
        self.processor = WhisperProcessor.from_pretrained(source)
        self.model = WhisperForConditionalGeneration.from_pretrained(
            source, dtype=plan.dtype, attn_implementation="sdpa"
        ).to(plan.device).eval()
        generation = self.model.generation_config
        self.multilingual = bool(getattr(generation, "is_multilingual", False))
        self.languages = {token[2:-2] for token in getattr(generation, "lang_to_id", {}) or {}}
        tokenizer = self.processor.tokenizer
        self._eot = generation.eos_token_id
        self._sot = generation.decoder_start_token_id
        self._prev = tokenizer.convert_tokens_to_ids("<|startofprev|>")
        self.verifier = GreedyVerifier(
            self.model, generation.suppress_tokens or [], generation.begin_suppress_tokens or [],
            self._eot, generation.no_timestamps_token_id - 1, max_draft=max_draft,
            decoder=self._decoder_for(self.model.model.decoder))
        self.assistant: Assistant | None = None
        self._assistant_decoder: Decoder | None = None
        if assistant_source is not None:
            self.assistant = load_assistant(assistant_source, assistant_label or assistant_source,
                                            self.model, tokenizer, plan, assistant_languages)
            self._assistant_decoder = self._decoder_for(self.assistant.decoder)
            self._assistant_head = OutputHead(self.assistant.proj_out)

    def _decoder_for(self, module: torch.nn.Module) -> Decoder:
        if self.cache == "dynamic":
            return DynamicDecoder(module)
        # The widest pass is the last accepted token plus a full draft.
        return StaticDecoder(module, graphs=self.graphs, max_width=self._max_draft + 1)

    def check_language(self, language: str | None) -> None:
        """Raise ValueError when this model cannot transcribe ``language``."""
        if language is None:
            return
        if not self.multilingual:
            if language != "en":
                raise ValueError(f"model {self.label} is English-only; language must be 'en'")
        elif language not in self.languages:
            raise ValueError(f"model {self.label} does not know language {language!r}")

    def sot_sequence(self, language: str | None) -> list[int]:
        tokenizer = self.processor.tokenizer
        sequence = [self._sot]
        if self.multilingual:
            sequence += tokenizer.convert_tokens_to_ids([f"<|{language}|>", "<|transcribe|>"])
        sequence.append(self.model.generation_config.no_timestamps_token_id)
        return sequence

    def features(self, audio: np.ndarray) -> torch.Tensor:
        seconds = len(audio) / SAMPLE_RATE
        if seconds > MAX_AUDIO_SECONDS:
            raise ValueError(f"{seconds:.1f} s of audio; Whisper takes at most 30 s at once")
        return self.processor.feature_extractor(
            audio, sampling_rate=SAMPLE_RATE, return_tensors="pt"
        ).input_features.to(self.plan.device, self.plan.dtype)

    @torch.inference_mode()
    def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                   with_words: bool = False, draft: tuple[int, ...] | None = None,
                   context: tuple[int, ...] = (), use_assistant: bool = True) -> Transcription:
        """Greedy transcription of at most 30 s of 16 kHz mono float32 audio.

        ``draft``: the tokens of an earlier decode of a prefix of this audio (lossless
        speed-up). ``context``: tokens of earlier text, given to the model as its prompt.
        """
        features = self.features(audio)
        # The encoder runs once; language detection, decoding and alignment share it.
        encoder_hidden = self.model.model.encoder(features).last_hidden_state
        if self.multilingual and language is None:
            language = self._detect_language(encoder_hidden)
        prefix = [self._prev, *context] if context else []
        prompt = prefix + self.sot_sequence(language)
        drafter = self._drafter(features, encoder_hidden, language, draft, use_assistant)
        decoded = self.verifier.decode(encoder_hidden, prompt, len(prefix), drafter)
        return self._finish(decoded, encoder_hidden, prompt, len(audio), with_words)

    @torch.inference_mode()
    def transcribe_batch(self, audios: list[np.ndarray], *, language: str | None,
                         with_words: list[bool]) -> list[Transcription]:
        """Plain greedy over several clips at once (no drafts, no context prompt).

        A multilingual model needs ``language`` here: detection is per clip.
        """
        if self.multilingual and language is None:
            raise ValueError("batched decoding needs a language for a multilingual model")
        features = torch.cat([self.features(audio) for audio in audios])
        encoder_hidden = self.model.model.encoder(features).last_hidden_state
        prompt = self.sot_sequence(language)
        decoded = self.verifier.decode_batch(encoder_hidden, prompt, 0)
        return [self._finish(d, encoder_hidden[i:i + 1], prompt, len(audios[i]), with_words[i])
                for i, d in enumerate(decoded)]

    def _finish(self, decoded, encoder_hidden, prompt: list[int], samples: int,
                with_words: bool) -> Transcription:
        tokens = decoded.tokens
        text = self.processor.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        rejected = self.guards.rejects(decoded.no_speech_prob, decoded.avg_logprob,
                                       compression_ratio(text)) if self.guards else None
        words: tuple[TimedWord, ...] = ()
        if rejected:
            text = ""
        elif with_words and tokens:
            words = tuple(self._words(encoder_hidden, prompt, tokens, samples / SAMPLE_RATE))
        return Transcription(text=text, tokens=tuple(tokens), words=words,
                             no_speech_prob=decoded.no_speech_prob,
                             avg_logprob=decoded.avg_logprob, rejected=rejected,
                             stats=decoded.stats)

    def _drafter(self, features, encoder_hidden, language, draft, use_assistant):
        hypothesis = HypothesisDrafter(draft) if draft else None
        assistant = None
        if use_assistant and self.assistant is not None and self.assistant.serves(language):
            state = self._assistant_decoder.begin(self.assistant.encode(features, encoder_hidden))
            assistant = AssistantDrafter(state, self._assistant_head, self.verifier.suppress,
                                         self.verifier.eot, max_length=self._max_draft)
        if hypothesis and assistant:
            return ChainedDrafter(hypothesis, assistant)
        return hypothesis or assistant

    def _detect_language(self, encoder_hidden) -> str:
        lang_ids = self.model.generation_config.lang_to_id
        start = torch.tensor([[self._sot]], device=encoder_hidden.device)
        hidden = self.model.model.decoder(input_ids=start,
                                          encoder_hidden_states=encoder_hidden).last_hidden_state
        logits = self.model.proj_out(hidden)[0, -1]
        ids = torch.tensor(list(lang_ids.values()), device=logits.device)
        best = list(lang_ids)[int(logits[ids].argmax())]
        return best[2:-2]

    def _words(self, encoder_hidden, prompt: list[int], tokens: list[int],
               seconds: float) -> list[TimedWord]:
        timing = forced_pass(self.model, encoder_hidden, prompt, tokens, self._eot, seconds)
        pieces, starts, ends, probs = _merge_partial_characters(
            [self.processor.tokenizer.decode([t]) for t in tokens],
            timing.starts.tolist(), timing.ends.tolist(), timing.probabilities.tolist(),
        )
        return group_words(pieces, starts, ends, probs)


def _merge_partial_characters(pieces, starts, ends, probs):
    """Merge tokens that hold part of a multi-byte character into the token after them."""
    out_p, out_s, out_e, out_pr = [], [], [], []
    carry: tuple[str, float, list[float]] | None = None
    for piece, start, end, prob in zip(pieces, starts, ends, probs):
        if carry is not None:
            piece, start, prob_list = carry[0] + piece, carry[1], carry[2] + [prob]
        else:
            prob_list = [prob]
        if "\ufffd" in piece:
            carry = (piece, start, prob_list)
            continue
        carry = None
        out_p.append(piece)
        out_s.append(start)
        out_e.append(end)
        out_pr.append(float(np.mean(prob_list)))
    return out_p, out_s, out_e, out_pr
