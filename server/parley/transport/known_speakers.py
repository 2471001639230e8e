"""Known speakers' clips: OpenAI's on its transcription form (``known_speaker_names[]``
and ``known_speaker_references[]``, protocol.md section 16), and a stream's
``known_speaker`` messages (section 2): a data URL of a 2 to 10 s clip of each voice, in
any format ffmpeg reads, decoded as an upload is.
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from parley.core.speaker_names import MAX_KNOWN_SPEAKERS, KnownSpeaker, check_known_speakers
from parley.protocol.errors import ErrorCode, ProtocolError
from parley.recordings.media import AudioTooLong, UndecodableAudio, decode_reference
from parley.sessions.speaker_track import SpeakerTrack
from parley.transport.upload_body import Form
from parley.transport.upload_errors import UploadCode, UploadError

NAMES = "known_speaker_names"
# A stream's known_speaker clips, refused ones too: each costs a decode (ffmpeg).
MAX_CLIPS_OFFERED = 2 * MAX_KNOWN_SPEAKERS
REFERENCES = "known_speaker_references"


def _listed(form: Form, name: str) -> list[str]:
    return form.all(f"{name}[]") + form.all(name)  # as OpenAI's SDK sends a list, or bare


async def known_speakers(form: Form, diarize: bool) -> tuple[KnownSpeaker, ...]:
    """The form's known speakers (none when it names none); UploadError for known
    speakers without speakers asked for (before any clip is decoded), names and
    references that do not pair, a reference that is no data URL, or a clip that cannot
    be decoded or lasts outside 2 to 10 s."""
    names, references = _listed(form, NAMES), _listed(form, REFERENCES)
    if not names and not references:
        return ()
    if not diarize:
        raise UploadError(
            UploadCode.BAD_REQUEST, "known speakers name the voices of a diarized transcript", NAMES
        )
    try:
        check_known_speakers(names, len(references))
    except ValueError as error:
        raise UploadError(UploadCode.BAD_REQUEST, str(error), NAMES) from None
    return tuple(
        [KnownSpeaker(name, await _clip(name, url)) for name, url in zip(names, references)]
    )


async def _clip(name: str, url: str) -> np.ndarray:
    try:
        return await reference_clip(name, url)
    except (UndecodableAudio, AudioTooLong) as error:
        raise UploadError(
            UploadCode.BAD_AUDIO, f"the reference of {name!r}: {error}", REFERENCES
        ) from None
    except ValueError as error:  # no data URL, or decoded and outside 2 to 10 s
        raise UploadError(UploadCode.BAD_REQUEST, str(error), REFERENCES) from None


async def reference_clip(name: str, url: str) -> np.ndarray:
    """A known speaker's 16 kHz clip from its base64 data URL: ValueError for no data
    URL, base64 that is not, or a clip outside 2 to 10 s; UndecodableAudio or AudioTooLong
    for what ffmpeg cannot read whole."""
    header, comma, data = url.partition(",")
    if not (comma and header.startswith("data:") and header.endswith(";base64")):
        raise ValueError(
            f"the reference of {name!r} is no base64 data URL (data:audio/wav;base64,...)"
        )
    try:
        clip = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise ValueError(f"the reference of {name!r} is not valid base64") from None
    with tempfile.NamedTemporaryFile(prefix="parley-reference-") as copy:
        copy.write(clip)
        copy.flush()
        return await decode_reference(Path(copy.name), name)


async def stream_known_speaker(track: SpeakerTrack | None, message: Mapping[str, Any]) -> None:
    """A stream's ``known_speaker`` message, given to its speakers; ProtocolError
    (BAD_MESSAGE) saying why where it is refused (the stream goes on)."""
    name, url = message.get("name"), message.get("audio")
    try:
        if track is None:
            raise ValueError("known speakers name a diarized stream's voices: diarization=true")
        if not isinstance(name, str) or not isinstance(url, str):
            raise ValueError('it needs a string "name" and "audio" (a base64 data URL)')
        check_known_speakers([*track.known_names, name], len(track.known_names) + 1)
        track.clips_offered += 1
        if track.clips_offered > MAX_CLIPS_OFFERED:  # each is a decode: bound what is refused
            raise ValueError(f"at most {MAX_CLIPS_OFFERED} clips a stream, refused ones too")
        await track.know(name, await reference_clip(name, url))
    except (ValueError, UndecodableAudio, AudioTooLong) as error:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"known_speaker refused: {error}") from None
