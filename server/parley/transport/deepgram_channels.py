"""Deepgram's ``multichannel=true`` on the live wire: each channel of the interleaved
audio is a session of its own (its own VAD, decoding and, when asked, speakers), and
every result says which channel it is of (``channel_index`` ``[i, n]``). Without it,
or with one channel, the connection is one session of the channels mixed."""

from __future__ import annotations

import numpy as np

from parley.protocol.messages import ErrorCode, ProtocolError, StreamConfig
from parley.sessions.session import Session
from parley.sessions.session_group import SessionGroup


class Channels:
    """A Deepgram connection's audio fed to its stream, channel by channel where the
    stream is a group, and each message's channel told back."""

    def __init__(self, config: StreamConfig, stream: Session | SessionGroup):
        self._stream = stream
        self.count = config.channels if isinstance(stream, SessionGroup) else 1
        self._sample_bytes = config.encoding.sample_width

    def sessions(self) -> list[Session]:
        """Each channel's session (every channel's at once, so that none holds the
        others' finals back by starting late)."""
        if isinstance(self._stream, Session):
            return [self._stream]
        # the group's config is each channel's: one channel
        return [self._stream.track(str(i), self._stream.config, "") for i in range(self.count)]

    async def feed(self, audio: bytes) -> None:
        """One audio message: mixed by the session, or split into its channels."""
        if isinstance(self._stream, Session):
            await self._stream.feed(audio)
            return
        frame = self._sample_bytes * self.count
        if len(audio) % frame:
            raise ProtocolError(
                ErrorCode.BAD_AUDIO,
                f"audio message of {len(audio)} bytes is not a whole number of {frame}-byte "
                f"sample frames ({self.count} channels); the message was dropped",
            )
        samples = np.frombuffer(audio, dtype=f"V{self._sample_bytes}").reshape(-1, self.count)
        for index, session in enumerate(self.sessions()):
            await session.feed(samples[:, index].tobytes())

    def of(self, segment_id: int | None) -> int:
        """The channel of a message about this segment (0 where there is one channel)."""
        if isinstance(self._stream, Session) or segment_id is None:
            return 0
        track = self._stream.track_of(segment_id)
        return int(track) if track is not None else 0
