"""The endpoint's own state that its sessions read: whether it drains, or shuts down."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Lifecycle:
    """``draining``: admit no one, end every session as after end_of_stream;
    ``shutting_down``: end them now (a task cancelled then ends with shutting_down)."""

    draining: asyncio.Event = field(default_factory=asyncio.Event)
    shutting_down: bool = False
