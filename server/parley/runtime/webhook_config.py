"""The settings of result webhooks, apart from the sender (which imports aiohttp), so
that reading the settings imports no HTTP client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WebhookConfig:
    """Where result webhooks go, how they are signed, and how hard delivery tries."""

    url: str | None  # where sessions' events go unless a session names its own
    secret: str  # whsec_ + base64, as Standard Webhooks gives them
    allowed_targets: tuple[str, ...] = ()  # URL prefixes a session may name as its own
    queue_size: int = 256  # events a session may have waiting
    max_attempts: int = 6
    first_retry_s: float = 0.5  # doubled after each failed attempt …
    max_retry_s: float = 30.0  # … up to this
    timeout_s: float = 10.0  # per attempt
