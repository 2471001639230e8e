"""The turn settings of an AssemblyAI /v3/ws connection (protocol.md section 10a): its
query's, changed by UpdateConfiguration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from parley.protocol.messages import ErrorCode, ProtocolError
from parley.transport.dialect import number_in

# AssemblyAI's defaults: how finished a turn's text must read to end at a pause, and the
# longest quiet after which a turn ends however it reads.
END_OF_TURN_CONFIDENCE_THRESHOLD = 0.4
MAX_TURN_SILENCE_MS = 1280
LONGEST_QUIET = "max_turn_silence"  # the Reply that ends a turn quiet that long


@dataclass(frozen=True)
class TurnOptions:
    """What a /v3/ws connection asked for beyond the stream's config."""

    format_turns: bool = False
    end_of_turn_confidence_threshold: float = END_OF_TURN_CONFIDENCE_THRESHOLD
    max_turn_silence_ms: int = MAX_TURN_SILENCE_MS

    def updated(self, given: Mapping[str, object]) -> TurnOptions:
        """These options with the turn settings ``given`` (query values, or an
        UpdateConfiguration's); ProtocolError(bad_config) for one out of range."""
        threshold = given.get("end_of_turn_confidence_threshold")
        longest = given.get("max_turn_silence")
        out = self
        if threshold is not None:
            value = number_in(threshold, 0.0, 1.0, "end_of_turn_confidence_threshold")
            out = replace(out, end_of_turn_confidence_threshold=value)
        if longest is not None:
            text = str(longest)
            if not (text.isascii() and text.isdigit()) or int(text) > 60_000:
                raise ProtocolError(
                    ErrorCode.BAD_CONFIG, "max_turn_silence is whole ms, at most 60000"
                )
            out = replace(out, max_turn_silence_ms=int(text))
        return out
