"""A network exported to ONNX once and kept beside its weights, for ONNX Runtime on a CPU.

Both speaker models run so on a CPU (``embedders``, ``segmentation``): faster than torch
at batch size one, the same numbers to rounding, and read back at every later start
without loading the code that made them. An export takes seconds of one core, so it is
kept, under a name that is a digest of everything it depends on: a changed input never
reads a stale export, and exports of older inputs are deleted but the latest one.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# Exports of other inputs kept beside a new one: the latest, for a server of the version
# before that shares the directory during an upgrade; older ones are 6 to 30 MB each
# that nothing reads again.
OTHER_EXPORTS_KEPT = 1


def kept_export(
    directory: Path, name: str, depends_on: list[bytes], export: Callable[[], bytes]
) -> bytes:
    """``export()``'s ONNX bytes, read from ``directory`` where an earlier load kept them.
    A directory nobody may write to (a read-only image) only costs the export at every
    load."""
    digest = hashlib.sha256(torch.__version__.encode())
    for part in depends_on:
        digest.update(hashlib.sha256(part).digest())  # each part's own: no two lists alike
    kept = directory / f"{name}-{digest.hexdigest()[:16]}.onnx"
    if kept.is_file():
        return kept.read_bytes()
    exported = export()
    partial = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(exported)
        partial.replace(kept)  # atomic: a concurrent load reads a whole file or none
    except OSError as exc:
        log.info("could not keep the %s export in %s (%s)", name, directory, exc)
        partial.unlink(missing_ok=True)
        return exported
    _forget_older(directory, name, kept)
    return exported


def _forget_older(directory: Path, name: str, kept: Path) -> None:
    """Delete ``name``'s exports of other inputs but the OTHER_EXPORTS_KEPT latest."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{16}\.onnx")
    others = [p for p in directory.iterdir() if pattern.fullmatch(p.name) and p != kept]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in others[OTHER_EXPORTS_KEPT:]:
        try:
            stale.unlink()
        except OSError as exc:  # another start deleted it first, or the directory is shared
            log.info("could not delete the stale export %s (%s)", stale, exc)


def export_onnx(
    model: torch.nn.Module,
    example: torch.Tensor,
    names: tuple[str, str],
    dynamic_axes: Mapping[str, Mapping[int, str]],
    metadata: Mapping[str, str] | None = None,
) -> bytes:
    """``model`` (one input, one output, named ``names``) as ONNX bytes, with ``metadata``
    in the file's own properties (read back by ``metadata_of``)."""
    exported = io.BytesIO()
    with warnings.catch_warnings():  # the exporter's notes on the model's own code
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            exported,
            input_names=[names[0]],
            output_names=[names[1]],
            dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()},
            dynamo=False,
        )
    if not metadata:
        return exported.getvalue()
    import onnx

    proto = onnx.load_from_string(exported.getvalue())
    for key, value in metadata.items():
        proto.metadata_props.add(key=key, value=value)
    return proto.SerializeToString()


def cpu_session(exported: bytes):
    """An ONNX Runtime session of ``exported`` on one thread (a speaker thread's share of
    the cores). One session serves several threads: its ``run`` may be called at once."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(exported, options, providers=["CPUExecutionProvider"])


def metadata_of(session) -> dict[str, str]:
    """The properties ``export_onnx`` wrote into the session's model."""
    return dict(session.get_modelmeta().custom_metadata_map)
