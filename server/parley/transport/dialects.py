"""The wires the streaming endpoint speaks: Parley's own, and the compatible ones."""

from __future__ import annotations

from parley.core.vad import VadConfig
from parley.transport.assemblyai import AssemblyAIDialect
from parley.transport.deepgram import DeepgramDialect
from parley.transport.dialect import Dialect
from parley.transport.flux import FluxDialect
from parley.transport.meeting import MeetingDialect
from parley.transport.native import NativeDialect
from parley.transport.openai_realtime import OpenAIRealtimeDialect
from parley.transport.twilio import TwilioDialect
from parley.transport.whisperlive import WhisperLiveDialect
from parley.transport.wyoming import WyomingDialect


def all_dialects(
    vad: VadConfig,
    twilio_token: str | None,
    twilio_public_url: str | None,
    wyoming_key: str | None = None,
) -> list[Dialect]:
    """Every wire, each over the server's ``vad`` where the client may reshape it;
    Twilio's requests signed with ``twilio_token`` (None: not checked); Wyoming's
    clients streaming as the key named ``wyoming_key``."""
    return [
        NativeDialect(),
        DeepgramDialect(vad),
        FluxDialect(),
        AssemblyAIDialect(vad),
        OpenAIRealtimeDialect(vad),
        TwilioDialect(twilio_token, twilio_public_url),
        MeetingDialect(),
        WhisperLiveDialect(),
        WyomingDialect(wyoming_key),
    ]
