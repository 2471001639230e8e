"""Logging set-up: text or JSON lines, and no secret in any line.

Every record passes a filter that replaces each configured secret (API keys, the
Hugging Face token), and whatever matches a secret's pattern (access tokens), wherever
it appears, arguments and tracebacks included. That
covers lines Parley does not write itself, such as websockets' request lines at
debug level, which carry the query string and so a ``token=`` parameter.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

REDACTED = "[redacted]"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"
# Fields Parley adds to its session lines (``extra=``); the text format shows them in
# the message as well.
SESSION_FIELDS = ("session_id", "key", "outcome", "audio_s", "error_codes")


class RedactSecrets(logging.Filter):
    """A log filter that replaces every secret (API keys, ``HF_TOKEN``) wherever it appears."""

    def __init__(self, secrets: Iterable[str], patterns: Iterable[re.Pattern[str]] = ()):
        super().__init__()
        # Longest first, so that a secret containing another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._patterns = tuple(patterns)

    def add(self, secrets: Iterable[str]) -> None:
        """Redact these too from now on (keys read again from the key file); the old
        ones stay redacted."""
        known = {*self._secrets, *(s for s in secrets if s)}
        self._secrets = sorted(known, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        """Write the record with every configured secret replaced, in its message, its
        exception and its session fields; never drops a record."""
        if not self._secrets and not self._patterns:
            return True
        record.msg = self._redact(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = self._redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        for name in SESSION_FIELDS:
            value = getattr(record, name, None)
            if isinstance(value, str):
                setattr(record, name, self._redact(value))
        return True

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for pattern in self._patterns:
            text = pattern.sub(REDACTED, text)
        return text


def redact_also(secrets: Iterable[str]) -> None:
    """Add ``secrets`` to the redaction of every handler ``configure_logging`` made."""
    for handler in logging.getLogger().handlers:
        for found in handler.filters:
            if isinstance(found, RedactSecrets):
                found.add(secrets)


def configure_logging(
    level: str,
    log_format: Literal["text", "json"] = "text",
    secrets: Iterable[str] = (),
    patterns: Iterable[re.Pattern[str]] = (),
) -> None:
    """Log to stderr at ``level`` in ``log_format``, with ``secrets`` and what matches
    ``patterns`` redacted."""
    handler = logging.StreamHandler()
    formatter = (
        JsonFormatter(
            JSON_FIELDS, rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}
        )
        if log_format == "json"
        else logging.Formatter(TEXT_FORMAT)
    )
    handler.setFormatter(formatter)
    handler.addFilter(RedactSecrets(secrets, patterns))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level != "debug":  # websockets logs every HTTP request and close at INFO
        logging.getLogger("websockets").setLevel(logging.WARNING)
