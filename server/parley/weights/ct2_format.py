"""Reader for CTranslate2's ``model.bin`` (binary version 6).

The layout, little-endian throughout: a header (version, spec name, spec revision,
variable count), then each variable (name, rank, shape, dtype index, byte count,
raw bytes), then aliases (name → target name). Strings are a uint16 length that
counts a trailing NUL, followed by the bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# CTranslate2's DataType enum order; bfloat16 has no numpy dtype and is widened on read.
_DTYPES: tuple[str, ...] = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
SUPPORTED_BINARY_VERSION = 6


class Ct2FormatError(ValueError):
    """The file is not a CTranslate2 model this reader understands."""


@dataclass(frozen=True)
class Ct2Model:
    """A CTranslate2 model file, read: its spec and named variables."""

    spec_name: str
    spec_revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def get(self, name: str) -> np.ndarray:
        """A variable by name, following aliases (e.g. a tied output projection)."""
        return self.variables[self.aliases.get(name, name)]

    def scalar(self, name: str) -> int:
        return int(self.get(name).reshape(()))


def _read(stream: BinaryIO, fmt: str) -> tuple:
    size = struct.calcsize(fmt)
    data = stream.read(size)
    if len(data) != size:
        raise Ct2FormatError("unexpected end of file")
    return struct.unpack(fmt, data)


def _read_string(stream: BinaryIO) -> str:
    (length,) = _read(stream, "<H")
    raw = stream.read(length)
    if len(raw) != length:
        raise Ct2FormatError("unexpected end of file in a string")
    return raw.rstrip(b"\0").decode("utf-8")


def _read_variable(stream: BinaryIO) -> tuple[str, np.ndarray]:
    name = _read_string(stream)
    (rank,) = _read(stream, "<B")
    shape = _read(stream, f"<{rank}I") if rank else ()
    (dtype_index,) = _read(stream, "<B")
    (nbytes,) = _read(stream, "<I")
    if dtype_index >= len(_DTYPES):
        raise Ct2FormatError(f"variable {name!r} has unknown dtype index {dtype_index}")
    raw = stream.read(nbytes)
    if len(raw) != nbytes:
        raise Ct2FormatError(f"variable {name!r} is truncated")
    dtype = _DTYPES[dtype_index]
    if dtype == "bfloat16":
        # bfloat16 is the high half of a float32: shift it back into place.
        array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
    expected = int(np.prod(shape)) if shape else 1
    if array.size != expected:
        raise Ct2FormatError(f"variable {name!r}: {array.size} values for shape {shape}")
    return name, array.reshape(shape)


def read_ct2_model(path: Path | str) -> Ct2Model:
    """A CTranslate2 ``model.bin``: its spec, variables and aliases; Ct2FormatError
    for another binary version."""
    with open(path, "rb") as stream:
        (version,) = _read(stream, "<I")
        if version != SUPPORTED_BINARY_VERSION:
            raise Ct2FormatError(
                f"{path}: binary version {version}, expected {SUPPORTED_BINARY_VERSION}"
            )
        spec_name = _read_string(stream)
        (revision,) = _read(stream, "<I")
        (count,) = _read(stream, "<I")
        variables = dict(_read_variable(stream) for _ in range(count))
        (alias_count,) = _read(stream, "<I")
        aliases = {}
        for _ in range(alias_count):
            alias = _read_string(stream)
            aliases[alias] = _read_string(stream)
        if stream.read(1):
            raise Ct2FormatError(f"{path}: trailing bytes after the aliases")
    return Ct2Model(spec_name, revision, variables, aliases)
