"""Starlette's multipart parser with the bounds an upload's form needs.

Starlette bounds each field and the number of fields; the fields are held in memory
while the form is read, so their bytes together are bounded too. The numbers let a
form carry everything protocol.md allows: 100 keyterms and 200 replacements, each a
field of its own as OpenAI's SDK sends a list, and four known speakers' reference clips
as data URLs (10 s of 16 kHz PCM16 WAV is 427 kB in base64).
"""

from __future__ import annotations

from starlette.formparsers import MultiPartException, MultiPartParser

MAX_FIELD_BYTES = 1024 * 1024  # one field that is not the file: a reference clip at most
MAX_FIELDS = 400
MAX_FIELDS_BYTES = 8 * 1024 * 1024  # all of them together


class BoundedFormParser(MultiPartParser):
    """``MultiPartParser`` that also refuses fields past ``MAX_FIELDS_BYTES`` together."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES, **kwargs)
        self._field_bytes = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._current_part.file is None:  # a field, not the file (starlette 1.10's own test)
            self._field_bytes += end - start
            if self._field_bytes > MAX_FIELDS_BYTES:
                raise MultiPartException(
                    f"the form's fields exceed {MAX_FIELDS_BYTES // 2**20} MiB together"
                )
        super().on_part_data(data, start, end)
