"""Greedy Whisper decoding that verifies drafted tokens (speculative decoding, lossless).

Each step feeds the last chosen token plus a draft to the main decoder in one pass.
The main model's greedy choice at every position decides: the draft is kept up to
its first disagreement, and the model's own choice there is the next token. The
output is therefore the main model's plain greedy output, token for token; drafts
only change how many passes it takes. With no drafter this is plain greedy decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from parley.models.decoder_state import Decoder, DynamicDecoder, OutputHead
from parley.models.drafters import Drafter


@dataclass
class DecodeStats:
    passes: int = 0        # main-decoder forward passes after the prompt
    drafted: int = 0       # draft tokens offered
    accepted: int = 0      # draft tokens kept
    verify_steps: int = 0  # passes that carried a draft

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.verify_steps if self.verify_steps else 0.0

    def add(self, other: "DecodeStats") -> None:
        self.passes += other.passes
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.verify_steps += other.verify_steps


@dataclass
class Decoded:
    tokens: list[int]
    no_speech_prob: float
    avg_logprob: float
    stats: DecodeStats = field(default_factory=DecodeStats)


class GreedyVerifier:
    """Decodes one sequence at batch size one, with whatever drafter it is given.

    ``decoder`` holds the cache (dynamic or static, see ``decoder_state``); batched
    decoding always uses transformers' own decoder and dynamic cache.
    """

    def __init__(self, model, suppress: Sequence[int], begin_suppress: Sequence[int],
                 eot: int, no_speech_token: int | None, max_draft: int = 15,
                 decoder: Decoder | None = None):
        self._model = model
        self._decoder = model.model.decoder
        self._single = decoder or DynamicDecoder(self._decoder)
        self.head = OutputHead(model.proj_out)
        self._max_positions = model.config.max_target_positions
        vocab = model.config.vocab_size
        device = model.device
        self.suppress = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.suppress[list(suppress)] = True
        self._begin_suppress = torch.zeros(vocab, dtype=torch.bool, device=device)
        self._begin_suppress[list(begin_suppress)] = True
        self.eot = eot
        self._no_speech_token = no_speech_token
        self.max_draft = max_draft

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).masked_fill(self.suppress, -math.inf)

    @torch.inference_mode()
    def decode(self, encoder_hidden, prompt: list[int], sot_index: int,
               drafter: Drafter | None = None) -> Decoded:
        """Greedy tokens after ``prompt`` (``prompt[sot_index]`` is <|startoftranscript|>)."""
        stats = DecodeStats()
        state = self._single.begin(encoder_hidden)
        hidden = state.feed(prompt)
        no_speech = 0.0
        if self._no_speech_token is not None:
            sot_logits = self.head(hidden[sot_index])
            no_speech = float(sot_logits.softmax(-1)[self._no_speech_token])
        first = self._logits(hidden[-1]).masked_fill(self._begin_suppress, -math.inf)
        logprobs = first.log_softmax(-1)
        next_token = int(first.argmax())
        total_logprob = float(logprobs[next_token])
        tokens: list[int] = []
        room = self._max_positions - len(prompt)
        while next_token != self.eot and len(tokens) < room:
            tokens.append(next_token)
            limit = min(self.max_draft, room - len(tokens) - 1)
            draft = drafter.propose(prompt, tokens, limit) if drafter and limit > 0 else []
            logits = self._logits(state.feed([next_token] + draft))
            stats.passes += 1
            choices = logits.argmax(-1).tolist()
            kept = 0
            while kept < len(draft) and draft[kept] == choices[kept] and draft[kept] != self.eot:
                kept += 1
            if draft:
                stats.verify_steps += 1
                stats.drafted += len(draft)
                stats.accepted += kept
                drafter.feedback(len(draft), kept)
                state.truncate(state.length - (len(draft) - kept))  # forget the rejected
            chosen = logits[: kept + 1].log_softmax(-1)
            picked = draft[:kept] + [choices[kept]]
            total_logprob += float(chosen[torch.arange(kept + 1), picked].sum())
            tokens.extend(draft[:kept])
            next_token = choices[kept]
        count = len(tokens) + 1  # the end-of-text choice counts, as in openai/whisper
        return Decoded(tokens, no_speech, total_logprob / count, stats)

    @torch.inference_mode()
    def decode_batch(self, encoder_hidden, prompt: list[int], sot_index: int) -> list[Decoded]:
        """Plain greedy decoding of a batch that shares one prompt (no drafts).

        When many decodes wait, one batched pass per step serves them all: speculative
        decoding pays at batch size one, batching pays when there is a queue.
        """
        batch = encoder_hidden.shape[0]
        device = encoder_hidden.device
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        ids = torch.tensor([prompt] * batch, device=device)
        hidden = self._decoder(input_ids=ids, encoder_hidden_states=encoder_hidden, cache=cache,
                               use_cache=True).last_hidden_state
        no_speech = [0.0] * batch
        if self._no_speech_token is not None:
            probs = self.head(hidden[:, sot_index]).softmax(-1)
            no_speech = probs[:, self._no_speech_token].tolist()
        logits = self.head(hidden[:, -1]).masked_fill(self.suppress, -math.inf)
        logits = logits.masked_fill(self._begin_suppress, -math.inf)
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprob = [0.0] * batch
        done = [False] * batch
        room = self._max_positions - len(prompt)
        for step in range(room + 1):
            choice = logits.argmax(-1)
            chosen_logprob = logits.log_softmax(-1).gather(1, choice[:, None])[:, 0].tolist()
            for i, token in enumerate(choice.tolist()):
                if done[i]:
                    continue
                logprob[i] += chosen_logprob[i]
                if token == self.eot or step == room:
                    done[i] = True
                else:
                    tokens[i].append(token)
            if all(done):
                break
            # Finished rows keep decoding end-of-text; their extra tokens are ignored.
            feed = torch.where(torch.tensor(done, device=device), self.eot, choice)[:, None]
            hidden = self._decoder(input_ids=feed, encoder_hidden_states=encoder_hidden,
                                   cache=cache, use_cache=True).last_hidden_state
            logits = self.head(hidden[:, -1]).masked_fill(self.suppress, -math.inf)
        return [Decoded(t, no_speech[i], logprob[i] / (len(t) + 1),
                        DecodeStats(passes=len(t) + 1)) for i, t in enumerate(tokens)]
