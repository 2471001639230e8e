"""``POST /predict``'s ``parameters``: the reference handler's (its validation_utils),
all accepted; those it chose for the caller are reported, not obeyed (Parley's
scheduler chooses between speculation and batching)."""

from __future__ import annotations

import json
import logging
import math

from parley.core.asr import Task
from parley.core.speaker_count import SpeakerCount
from parley.transport.upload_errors import UploadCode, UploadError

log = logging.getLogger(__name__)

PREDICT_PARAMETERS = (
    "task",
    "batch_size",
    "chunk_length_s",
    "sampling_rate",
    "assisted",
    "language",
    "num_speakers",
    "min_speakers",
    "max_speakers",
    "prompt",
    "keyterms",
    "replace",
    "languages",
)  # the last four are Parley's own


def predict_parameters(raw: str | None) -> tuple[dict, list[str]]:
    """The ``parameters`` form field: the known ones, and a warning for each one ignored;
    UploadError unless it is a JSON object."""
    if raw is None or not raw.strip():
        return {}, []
    try:
        # NaN, Infinity and numbers past a float's range are not JSON's, and could not
        # be answered back in the result's ``parameters``
        parameters = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        raise UploadError(
            UploadCode.BAD_REQUEST, "parameters must be a JSON object", "parameters"
        ) from None
    if not isinstance(parameters, dict):
        raise UploadError(UploadCode.BAD_REQUEST, "parameters must be a JSON object", "parameters")
    warnings = [
        f"unknown parameter {name!r} ignored"
        for name in parameters
        if name not in PREDICT_PARAMETERS
    ]
    for warning in warnings:
        log.warning("predict: %s", warning)
    return {k: v for k, v in parameters.items() if k in PREDICT_PARAMETERS}, warnings


def _not_json(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is past a float's range")
    return value


def predict_decoding(parameters: dict) -> dict:
    """The reference handler's ``task`` and ``language``, and Parley's ``prompt``,
    ``keyterms``, ``replace`` and ``languages`` (lists of strings)."""
    try:
        task = Task(str(parameters.get("task", "transcribe")))
    except ValueError:
        raise UploadError(
            UploadCode.BAD_REQUEST, "task must be transcribe or translate", "parameters"
        ) from None
    keyterms = parameters.get("keyterms") or []
    replace = parameters.get("replace") or []
    languages = parameters.get("languages") or []
    prompt = parameters.get("prompt") or ""
    language = parameters.get("language") or None
    if not (
        all(
            isinstance(k, list) and all(isinstance(i, str) for i in k)
            for k in (keyterms, replace, languages)
        )
        and isinstance(prompt, str)
        and (language is None or isinstance(language, str))
    ):
        raise UploadError(
            UploadCode.BAD_REQUEST,
            "keyterms, replace and languages must be lists of strings, prompt and language strings",
            "parameters",
        )
    return {
        "task": task,
        "language": language,
        "keyterms": tuple(keyterms),
        "replace": tuple(replace),
        "prompt": prompt,
        "languages": tuple(languages),
    }


def speaker_count(
    num: str | int | float | None,
    least: str | int | float | None,
    most: str | int | float | None,
) -> SpeakerCount:
    """The reference handler's num/min/max_speakers (None or blank: not given)."""

    def number(value, name: str) -> int | None:
        if value is None or value == "":
            return None
        refused = UploadError(UploadCode.BAD_REQUEST, f"{name} must be an integer", param=name)
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise refused  # JSON's true, or 2.5
        try:
            return int(value)
        except (TypeError, ValueError):
            raise refused from None

    try:
        return SpeakerCount(
            number(num, "num_speakers"),
            number(least, "min_speakers") or 1,
            number(most, "max_speakers"),
        )
    except ValueError as exc:
        raise UploadError(UploadCode.BAD_REQUEST, str(exc)) from None
