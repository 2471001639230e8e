"""Short-lived access tokens, so that a browser or a phone never holds an API key.

An application's backend asks the server for a token with its key (protocol.md
section 17; Deepgram's, AssemblyAI's and OpenAI's token requests too) and hands the
token to its page, which streams with it where it would offer a key. A token stands for
its key (the key's limits and name apply) until it expires; it cannot ask for another.

A token is its key's name and expiry (and an OpenAI client secret's session), signed
with an HMAC keyed by the key itself: nothing is stored, so every replica that holds the
key accepts it, and revoking the key (removing or changing it) revokes its tokens.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from typing import Any

PREFIX = "pt_"  # an offered credential that starts so is a token, not a key
PATTERN = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")  # for the logs
MAX_TTL_S = 7200  # two hours at most, as OpenAI's client secrets
DEFAULT_TTL_S = 60
_CONTEXT = b"parley access token\x00"  # so a token's signature is of nothing else


def mint(
    name: str, secret: bytes, ttl_s: int, now: float, session: dict[str, Any] | None = None
) -> tuple[str, int]:
    """A token for the key ``name`` (whose value is ``secret``), valid ``ttl_s``
    seconds from ``now``, carrying ``session`` (the settings of the sessions it opens);
    and its expiry, in Unix seconds."""
    expires_at = int(now) + ttl_s
    claims: dict[str, Any] = {"k": name, "exp": expires_at}
    if session:
        claims["s"] = session
    payload = _encode(json.dumps(claims, separators=(",", ":")).encode())
    return f"{PREFIX}{payload}.{_encode(_signature(secret, payload))}", expires_at


def claimed_key(token: str) -> str | None:
    """The key name a token claims (not yet checked), or None if it is not a token."""
    claims = _claims(token)
    return claims[0] if claims is not None else None


def session_of(token: str) -> dict[str, Any] | None:
    """The session settings a token carries (None: none, or not a token). Unchecked:
    read it only of a token admission has accepted."""
    claims = _claims(token)
    return claims[2] if claims is not None else None


def valid(token: str, secret: bytes, now: float) -> bool:
    """Whether ``token`` was minted with ``secret`` and has not expired at ``now``."""
    claims = _claims(token)
    if claims is None:
        return False
    payload, _, signature = token[len(PREFIX) :].partition(".")
    expected = _encode(_signature(secret, payload))
    return hmac.compare_digest(signature.encode(), expected.encode()) and now < claims[1]


def _claims(token: str) -> tuple[str, int, dict[str, Any] | None] | None:
    if not token.startswith(PREFIX) or token.count(".") != 1:
        return None
    payload = token[len(PREFIX) :].partition(".")[0]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(claims, dict):
        return None
    name, expires_at, session = claims.get("k"), claims.get("exp"), claims.get("s")
    if not isinstance(name, str) or type(expires_at) is not int:
        return None
    return name, expires_at, session if isinstance(session, dict) else None


def _signature(secret: bytes, payload: str) -> bytes:
    return hmac.new(secret, _CONTEXT + payload.encode(), hashlib.sha256).digest()


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
