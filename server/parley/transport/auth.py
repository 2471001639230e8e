"""Who may stream: named API keys (or their access tokens), and which browser pages
may open a stream.

A key's *name* is what logs and metrics show; its value is only ever compared, in
constant time, against what a client offers, or used to check a token's signature.
"""

from __future__ import annotations

import hmac
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from parley.transport import access_tokens

KEY_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
ANONYMOUS = "anonymous"  # the key name of a session on a server without keys
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class ApiKeys:
    """Named keys; empty means that the server lets anyone stream."""

    keys: tuple[tuple[str, bytes], ...] = ()
    # A token past its expiry still stands for its key (a resume: the session's own
    # resume_token is the proof, and a page's token expires long before its stream)
    expired_tokens: bool = False

    @classmethod
    def of(cls, named: Mapping[str, str]) -> ApiKeys:
        """Keys from a name → value mapping; ValueError on a bad name or an empty value."""
        for name, value in named.items():
            if not KEY_NAME.match(name):
                raise ValueError(f"API key name {name!r} must be 1 to 64 of A-Z a-z 0-9 _ . -")
            if name == ANONYMOUS:
                raise ValueError(
                    f"{ANONYMOUS!r} names the sessions of no key: name the key otherwise"
                )
            if not value.strip():
                raise ValueError(f"API key {name!r} is empty")
        return cls(tuple((name, value.strip().encode()) for name, value in named.items()))

    @property
    def required(self) -> bool:
        return bool(self.keys)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.keys)

    @property
    def values(self) -> tuple[str, ...]:
        """The secrets themselves, for the log filter that redacts them."""
        return tuple(value.decode() for _, value in self.keys)

    def identify(self, offered: str | None, now: float | None = None) -> str | None:
        """The name of the key ``offered`` is, or that an access token ``offered`` stands
        for while it is valid (at ``now``, Unix seconds), or None."""
        found = self.identify_key(offered)
        if found is None and offered is not None:
            name = access_tokens.claimed_key(offered)
            secret = self.secret_of(name) if name is not None else None
            now = -math.inf if self.expired_tokens else time.time() if now is None else now
            if secret is not None and access_tokens.valid(offered, secret, now):
                found = name
        return found

    def identify_key(self, offered: str | None) -> str | None:
        """The name of the key ``offered`` is (a key itself, not a token), or None. Every
        key is compared, each in constant time, so the time taken does not tell which
        key nearly matched."""
        if offered is None:
            return None
        candidate = offered.encode()
        found = None
        for name, value in self.keys:
            if hmac.compare_digest(candidate, value) and found is None:
                found = name
        return found

    def resuming(self) -> ApiKeys:
        """These keys, with their expired tokens too, for a resume."""
        return replace(self, expired_tokens=True)

    def secret_of(self, name: str) -> bytes | None:
        """The value of the key named ``name`` (None if there is none)."""
        return next((value for key, value in self.keys if key == name), None)


def read_key_file(path: Path) -> dict[str, str]:
    """``name:key`` lines (blank lines and ``#`` comments skipped); ValueError if malformed."""
    named: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"{path}:{number}: expected name:key")  # the line may be a key
        if name.strip() in named:
            raise ValueError(f"{path}:{number}: key name {name.strip()!r} given twice")
        named[name.strip()] = value
    return named


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


@dataclass(frozen=True)
class OriginPolicy:
    """Which pages may open a stream from a browser (browsers send ``Origin``; other
    clients do not, and are not concerned). ``allowed`` None: only pages this server
    served itself (the Origin's host is the Host the request was sent to)."""

    allowed: frozenset[str] | None = None

    def allows(self, origin: str | None, host: str | None) -> bool:
        """Whether a browser's ``Origin`` may connect: any when no origin is sent (not a
        browser), those configured, else only the server's own host."""
        if origin is None:
            return True
        if self.allowed is not None:
            return "*" in self.allowed or origin.rstrip("/").lower() in self.allowed
        return host is not None and urlsplit(origin).netloc.lower() == host.lower()

    @classmethod
    def of(cls, origins: list[str] | None) -> OriginPolicy:
        """The policy of the configured origins (None: the server's own host only)."""
        if origins is None:
            return cls(None)
        return cls(frozenset(o.rstrip("/").lower() for o in origins))
