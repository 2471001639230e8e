"""OpenAI's known speakers on its transcription form: ``known_speaker_names[]`` and
``known_speaker_references[]`` (a data URL of a 2 to 10 s clip of each voice, in any
format ffmpeg reads), read and decoded as the upload itself is (protocol.md section 16).
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from pathlib import Path

import numpy as np

from parley.core.speaker_names import KnownSpeaker, check_known_speakers
from parley.recordings.media import AudioTooLong, UndecodableAudio, decode_reference
from parley.transport.upload_body import Form
from parley.transport.upload_errors import UploadCode, UploadError

NAMES = "known_speaker_names"
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
    header, comma, data = url.partition(",")
    if not (comma and header.startswith("data:") and header.endswith(";base64")):
        raise UploadError(
            UploadCode.BAD_REQUEST,
            f"the reference of {name!r} is no base64 data URL (data:audio/wav;base64,...)",
            REFERENCES,
        )
    try:
        clip = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise UploadError(
            UploadCode.BAD_REQUEST, f"the reference of {name!r} is not valid base64", REFERENCES
        ) from None
    with tempfile.NamedTemporaryFile(prefix="parley-reference-") as copy:
        copy.write(clip)
        copy.flush()
        try:
            return await decode_reference(Path(copy.name), name)
        except (UndecodableAudio, AudioTooLong) as error:
            raise UploadError(
                UploadCode.BAD_AUDIO, f"the reference of {name!r}: {error}", REFERENCES
            ) from None
        except ValueError as error:  # decoded, outside 2 to 10 s
            raise UploadError(UploadCode.BAD_REQUEST, str(error), REFERENCES) from None
