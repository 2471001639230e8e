"""/v1/realtime?intent=transcription: OpenAI's realtime transcription sessions, over the
same session as /v1/stream.

Audio comes base64 in ``input_audio_buffer.append`` events; each turn becomes an item
whose transcript arrives as ``delta`` and ``completed`` events. Deltas cannot be taken
back, so only text that will not change is sent: a final's whole text, never a
partial's. What is honoured, approximated and ignored is listed in protocol.md,
section 10; this module follows that table.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import uuid
from collections import deque
from collections.abc import Mapping

from websockets.datastructures import Headers

from parley.core.vad import VadConfig
from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    Finalized,
    FinalReason,
    ProtocolError,
    SegmentEnded,
    ServerMessage,
    SessionEnded,
    SpeechStarted,
)
from parley.protocol.paths import REALTIME_PATH
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport import access_tokens
from parley.transport.dialect import KeyOffered, Opened, Setup, json_event
from parley.transport.native import bearer_or_token
from parley.transport.openai_events import (
    Item,
    commit_empty,
    error_event,
    speech_stopped,
    transcript_events,
    transcription_failed,
)
from parley.transport.openai_session import DEFAULT_CONFIG, SessionSettings
from parley.transport.openai_turns import HELD_TOO_LONG, HeldItems, TurnItem

# The Reply kind of an event sent once everything queued before it has gone out.
EVENT = "event"
BROWSER_KEY_PREFIX = "openai-insecure-api-key."  # the subprotocol browsers send a key in


class OpenAIRealtimeDialect(KeyOffered):
    """OpenAI's realtime transcription sessions (protocol.md section 10)."""

    path = REALTIME_PATH
    resumable = False

    def __init__(self, vad: VadConfig):
        self._vad = vad

    @staticmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        for offered in headers.get("Sec-WebSocket-Protocol", "").split(","):
            if offered.strip().startswith(BROWSER_KEY_PREFIX):
                return offered.strip()[len(BROWSER_KEY_PREFIX) :]
        return bearer_or_token(headers)

    def subprotocol(self, offered: list[str]) -> str | None:
        return "realtime" if "realtime" in offered else None

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[SessionSettings | None]:
        if params.get("intent") != "transcription":
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                "Parley serves transcription sessions only: connect with ?intent=transcription",
            )
        # A client secret's session (checked when it was minted, and signed with it: the
        # admission has accepted the token by now); the server's model is checked again.
        offered = self.offered_key(params, headers)
        fields = access_tokens.session_of(offered) if offered is not None else None
        if not fields:
            return Setup(DEFAULT_CONFIG, self._vad, options=None)
        start = SessionSettings(DEFAULT_CONFIG, self._vad)
        settings = start.updated(fields, False, self._vad, lambda decoding: None)
        return Setup(settings.config, settings.vad, options=settings)

    def error(self, error: Error) -> str:
        return json.dumps(error_event(f"event_{uuid.uuid4().hex[:20]}", error))

    def translator(
        self, opened: Opened[SessionSettings | None], streams: StreamFactory
    ) -> OpenAIRealtimeTranslator:
        session = streams.single(opened.setup.config, opened.setup.vad)
        return OpenAIRealtimeTranslator(opened, session, self._vad)


class OpenAIRealtimeTranslator:
    """One OpenAI realtime connection: its events to and from a Parley session."""

    def __init__(self, opened: Opened[SessionSettings | None], session: Session, vad: VadConfig):
        self._opened = opened
        self._session = session
        self._server_vad_defaults = vad
        self._session_id = f"sess_{opened.session_id[:24]}"
        self._events = itertools.count(1)
        self._items = itertools.count(1)
        self._settings = opened.setup.options or SessionSettings(
            opened.setup.config, opened.setup.vad or vad
        )
        self._previous_item: str | None = None
        self._segments: dict[int, Item] = {}  # server VAD: each segment's item
        self._held_items = HeldItems()  # semantic_vad: items held open at a pause
        self._manual_item: Item | None = None  # without: the item the next commit makes
        self._finalizing: deque[str] = deque()  # "commit" or "clear", per finalize asked
        self._heard_since_commit = False
        self._commit_transcribed = False  # whether a commit's finalize closed any speech
        self._refused_events: deque = deque()  # client event ids of refused events, in order

    # ------------------------------------------------------------------ client → server

    def opening(self) -> list[str]:
        return [self._send({"type": "session.created", "session": self._session_json()})]

    @property
    def stream(self) -> Session:
        return self._session

    async def receive(self, message: str | bytes) -> bool:
        session = self._session
        event: dict = {}
        try:
            event = json_event(
                message,
                ("type",),
                "events are JSON text objects with a "
                'string "type" (audio goes base64 in '
                "input_audio_buffer.append)",
            )
            await self._dispatch(event, session)
        except ProtocolError:
            # The endpoint reports it in stream order; its error event names the client's.
            self._refused_events.append(event.get("event_id"))
            raise
        return False

    async def _dispatch(self, event: dict, session: Session) -> None:
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            await self._append(event, session)
        elif kind == "input_audio_buffer.commit":
            await self._commit(event, session)
        elif kind == "input_audio_buffer.clear":
            self._heard_since_commit = False
            self._finalizing.append("clear")
            await session.finalize()
        elif kind in ("session.update", "transcription_session.update"):
            await self._update(event, session, old_form=kind.startswith("transcription_"))
        else:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"event type {kind!r} is not supported by a transcription session",
            )

    async def _append(self, event: dict, session: Session) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, 'input_audio_buffer.append needs "audio": base64 audio'
            )
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(
                ErrorCode.BAD_AUDIO, "audio is not valid base64; the event was dropped"
            ) from None
        await session.feed(data)
        self._heard_since_commit = self._heard_since_commit or bool(data)
        if self._settings.eagerness is not None:  # an item held too long is committed
            await self._held_items.check(session, self._settings.eagerness)

    async def _commit(self, event: dict, session: Session) -> None:
        if not self._heard_since_commit:
            await session.mark(Reply(EVENT, commit_empty(event.get("event_id"))))
            return
        self._heard_since_commit = False
        self._finalizing.append("commit")
        self._commit_transcribed = False
        await session.finalize()

    async def _update(self, event: dict, session: Session, old_form: bool) -> None:
        fields = event.get("session")
        if not isinstance(fields, dict):
            raise ProtocolError(ErrorCode.BAD_CONFIG, 'session.update needs a "session" object')
        new = self._settings.updated(
            fields, old_form, self._server_vad_defaults, self._opened.check_decoding
        )
        session.reconfigure(new.config, new.vad)  # ProtocolError (nothing applied) if too late
        self._settings = new
        updated = "transcription_session.updated" if old_form else "session.updated"
        await session.mark(Reply(EVENT, {"type": updated, "session": self._session_json()}))

    # ------------------------------------------------------------------ server → client

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        return [self._send(event) for event in self._translate(message)]

    def _translate(self, message: ServerMessage | Mark) -> list[dict]:
        if isinstance(message, Mark):
            if isinstance(message.payload, Reply) and message.payload.kind == HELD_TOO_LONG:
                return self._commit_held()
            return [message.payload.data] if isinstance(message.payload, Reply) else []
        if isinstance(message, SessionEnded):
            return self._commit_held()  # nothing heard is left uncommitted
        if isinstance(message, SpeechStarted):
            return self._speech_started(message)
        if isinstance(message, SegmentEnded):
            return self._segment_ended(message)
        if isinstance(message, Final):
            return self._final(message)
        if isinstance(message, Finalized):
            return self._finalized()
        if isinstance(message, Error):
            sid = message.segment_id
            item = None if sid is None else self._segments.pop(sid, None)
            if message.code is ErrorCode.TRANSCRIPTION_FAILED and item is not None:
                self._held_items.drop(item)
                return [transcription_failed(item, message)]
            refused = sid is None and self._refused_events
            client_event = self._refused_events.popleft() if refused else None
            return [error_event(self._event_id(), message, client_event)]
        return []  # partials (deltas cannot be retracted), speaker updates, session_ended

    def _speech_started(self, message: SpeechStarted) -> list[dict]:
        if not self._settings.server_vad:
            return []
        if self._held_items.held is not None:  # semantic_vad: the held item's speech goes on
            self._segments[message.segment_id] = self._held_items.held.item
            return []
        item = self._segments[message.segment_id] = Item(self._item_id())
        return [
            {
                "type": "input_audio_buffer.speech_started",
                "audio_start_ms": round(message.start * 1000),
                "item_id": item.id,
            }
        ]

    def _clearing(self, reason: FinalReason) -> bool:
        """Whether this segment's audio is what the client asked to clear (with server VAD
        only the segment the clear closed; without, everything since the last commit)."""
        clearing = bool(self._finalizing) and self._finalizing[0] == "clear"
        return clearing and (not self._settings.server_vad or reason is FinalReason.FINALIZE)

    def _segment_ended(self, ended: SegmentEnded) -> list[dict]:
        """Server VAD: the speech stopped and its item is committed now, not once decoded."""
        if not self._settings.server_vad:
            return []
        if self._clearing(ended.reason):
            self._segments.pop(ended.segment_id, None)
            return []
        item = self._segments.setdefault(ended.segment_id, Item(self._item_id()))
        if self._settings.eagerness is not None and ended.reason is FinalReason.SILENCE:
            return []  # semantic_vad: committed once its final's text is read
        if ended.reason is FinalReason.FINALIZE:
            self._commit_transcribed = True
        return [speech_stopped(item, ended.end), self._committed(item)]

    def _final(self, final: Final) -> list[dict]:
        text = final.text.strip()
        if not self._settings.server_vad:
            if self._clearing(final.reason):
                self._manual_item = None
                return []
            manual = self._manual_item = self._manual_item or Item(self._item_id())
            if text:
                manual.texts.append(text)
                manual.words.extend(final.words)  # include may be asked before the commit
            return []  # sent when the client commits
        item = self._segments.pop(final.segment_id, None)
        if item is None:
            return []  # cleared
        eagerness = self._settings.eagerness
        if eagerness is None:
            words = final.words if self._settings.logprobs else None
            return transcript_events(item, [text] if text else [], final.end - final.start, words)
        turn = self._held_items.heard(item, final, eagerness)  # None: held ("… a flight to")
        return [] if turn is None else self._close(turn, final.reason is FinalReason.SILENCE)

    def _close(self, turn: TurnItem, uncommitted: bool) -> list[dict]:
        """semantic_vad: an item's speech is over: committed where a pause cut it, then its
        transcript."""
        item, heard = turn.item, turn.turn
        events = [speech_stopped(item, turn.end), self._committed(item)] if uncommitted else []
        words = heard.words if self._settings.logprobs else None
        return events + transcript_events(item, heard.texts, turn.seconds, words)

    def _commit_held(self) -> list[dict]:
        return [] if (turn := self._held_items.take_held()) is None else self._close(turn, True)

    def _finalized(self) -> list[dict]:
        purpose = self._finalizing.popleft() if self._finalizing else "commit"
        if purpose == "clear":
            self._held_items.take_held()  # its audio is the buffer's: never committed
            if not self._settings.server_vad:
                # Segments the VAD closed before the clear may have been transcribed before
                # it arrived: they are part of the buffer it drops too.
                self._manual_item = None
            return [{"type": "input_audio_buffer.cleared"}]
        if self._settings.server_vad:
            # The commit's speech was an item of its own (one semantic_vad held goes now); if
            # server VAD had committed all of it already, the buffer was empty, as OpenAI says.
            held = self._commit_held()
            return held or ([] if self._commit_transcribed else [commit_empty(None)])
        if self._manual_item is None:
            return []
        item, self._manual_item = self._manual_item, None
        words = item.words if self._settings.logprobs else None
        return [self._committed(item), *transcript_events(item, item.texts, None, words)]

    def _committed(self, item: Item) -> dict:
        event = {
            "type": "input_audio_buffer.committed",
            "item_id": item.id,
            "previous_item_id": self._previous_item,
        }
        self._previous_item = item.id
        return event

    # ------------------------------------------------------------------ helpers

    def _send(self, event: dict) -> str:
        return json.dumps({"event_id": self._event_id(), **event}, ensure_ascii=False)

    def _event_id(self) -> str:
        return f"event_{self._session_id[5:17]}{next(self._events):06d}"

    def _item_id(self) -> str:
        return f"item_{self._session_id[5:17]}{next(self._items):06d}"

    def _session_json(self) -> dict:
        return self._settings.to_json(self._session_id, self._opened.model)
