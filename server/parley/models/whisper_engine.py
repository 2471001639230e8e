"""Whisper through transformers: one engine owns one loaded model (and runs on one thread)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration, WhisperProcessor
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging as hf_logging

from parley.core.words import TimedWord, group_words
from parley.models.alignment import forced_pass
from parley.models.device import DevicePlan

log = logging.getLogger(__name__)
SAMPLE_RATE = 16000
MAX_AUDIO_SECONDS = 30.0


@dataclass(frozen=True)
class Transcription:
    text: str
    tokens: tuple[int, ...]
    words: tuple[TimedWord, ...] = field(default=())  # times relative to the audio start


class WhisperEngine:
    """Loads a Whisper model (bundle directory, local path or hub id) and transcribes audio."""

    def __init__(self, source: str, label: str, plan: DevicePlan):
        hf_logging.set_verbosity_error()  # transformers' deprecation chatter is not ours to show
        self.label = label
        self.plan = plan
        self.processor = WhisperProcessor.from_pretrained(source)
        self.model = WhisperForConditionalGeneration.from_pretrained(
            source, dtype=plan.dtype, attn_implementation="sdpa"
        ).to(plan.device).eval()
        generation = self.model.generation_config
        self.multilingual = bool(getattr(generation, "is_multilingual", False))
        self.languages = {token[2:-2] for token in getattr(generation, "lang_to_id", {}) or {}}
        self._eot = generation.eos_token_id
        self._first_special = self.processor.tokenizer.convert_tokens_to_ids("<|endoftext|>")

    def check_language(self, language: str | None) -> None:
        """Raise ValueError when this model cannot transcribe ``language``."""
        if language is None:
            return
        if not self.multilingual:
            if language != "en":
                raise ValueError(f"model {self.label} is English-only; language must be 'en'")
        elif language not in self.languages:
            raise ValueError(f"model {self.label} does not know language {language!r}")

    def _prompt(self, language: str | None) -> list[int]:
        tokenizer = self.processor.tokenizer
        prompt = [self.model.generation_config.decoder_start_token_id]
        if self.multilingual:
            if language is None:
                raise ValueError("a language is needed for the forced pass")
            prompt += tokenizer.convert_tokens_to_ids([f"<|{language}|>", "<|transcribe|>"])
        prompt.append(self.model.generation_config.no_timestamps_token_id)
        return prompt

    @torch.inference_mode()
    def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                   with_words: bool = False) -> Transcription:
        """Greedy transcription of at most 30 s of 16 kHz mono float32 audio."""
        seconds = len(audio) / SAMPLE_RATE
        if seconds > MAX_AUDIO_SECONDS:
            raise ValueError(f"{seconds:.1f} s of audio; Whisper takes at most 30 s at once")
        features = self.processor.feature_extractor(
            audio, sampling_rate=SAMPLE_RATE, return_tensors="pt"
        ).input_features.to(self.plan.device, self.plan.dtype)
        # The encoder runs once; generate, language detection and alignment share it.
        encoder_hidden = self.model.model.encoder(features).last_hidden_state
        encoded = BaseModelOutput(last_hidden_state=encoder_hidden)
        if self.multilingual and language is None:
            language = self._detect_language(encoder_hidden)
        kwargs = {"language": language, "task": "transcribe"} if self.multilingual else {}
        sequences = self.model.generate(
            encoder_outputs=encoded, do_sample=False, num_beams=1, **kwargs
        )
        tokens = [t for t in sequences[0].tolist() if t < self._first_special]
        text = self.processor.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        words: tuple[TimedWord, ...] = ()
        if with_words and tokens:
            words = tuple(self._words(encoder_hidden, self._prompt(language), tokens, seconds))
        return Transcription(text=text, tokens=tuple(tokens), words=words)

    def _detect_language(self, encoder_hidden) -> str:
        lang_ids = self.model.generation_config.lang_to_id
        start = torch.tensor([[self.model.generation_config.decoder_start_token_id]],
                             device=encoder_hidden.device)
        logits = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden),
                            decoder_input_ids=start).logits
        ids = torch.tensor(list(lang_ids.values()), device=logits.device)
        best = list(lang_ids)[int(logits[0, -1, ids].argmax())]
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
