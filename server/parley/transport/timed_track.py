"""Audio of one track that comes with the time it was taken at (a phone call's media
timestamps, a meeting participant's): a gap in what arrives becomes silence, so that
the track's results are told in the call's or meeting's time."""

from __future__ import annotations

from dataclasses import dataclass

from parley.protocol.messages import Encoding, ErrorCode, ProtocolError, StreamConfig
from parley.sessions.session import Session

MAX_GAP_S = 3600.0  # audio further ahead of its track than this is refused
HEAD_S = 0.25  # of a gap, fed as silence through the decoder (its resampler's delay is less)
SILENCE = {
    Encoding.PCM_S16LE: b"\x00\x00",
    Encoding.PCM_F32LE: b"\x00" * 4,
    Encoding.MULAW: b"\xff",
    Encoding.ALAW: b"\xd5",
}


@dataclass
class TimedTrack:
    """A track timed by the sender's timestamps, gaps filled with silence."""

    config: StreamConfig
    start_s: float = 0.0  # the time the track's first audio was taken at
    fed_bytes: int = 0

    @property
    def _bytes_per_s(self) -> int:
        return self.config.bytes_per_frame * self.config.sample_rate

    async def feed(self, session: Session, payload: bytes, at_s: float | None) -> None:
        """Feed ``payload``, taken at ``at_s`` (None: right after the audio before it);
        a gap since the track's last audio is silence first (Session.skip_silence)."""
        if at_s is not None:
            frame = self.config.bytes_per_frame
            gap = round((at_s - self.start_s) * self._bytes_per_s) - self.fed_bytes
            gap -= gap % frame
            if gap > MAX_GAP_S * self._bytes_per_s:
                raise ProtocolError(
                    ErrorCode.BAD_AUDIO,
                    f"audio taken at {at_s:g} s is more "
                    "than an hour ahead of its track; it was dropped",
                )
            if gap > 0:
                # The head goes through the decoder, so its resampler's last samples of
                # audio come out before the silence; the rest only moves the clock.
                head = min(gap, int(HEAD_S * self._bytes_per_s) // frame * frame)
                await session.feed(
                    SILENCE[self.config.encoding] * self.config.channels * (head // frame)
                )
                await session.skip_silence((gap - head) / self._bytes_per_s)
                self.fed_bytes += gap
        await session.feed(payload)
        self.fed_bytes += len(payload)
