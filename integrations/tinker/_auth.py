"""Tinker's JWT exchange: an API key traded for a short-lived token the client sends instead.

With ``pjwt_auth_enabled`` in ``/client/config`` the official client posts its API key to
``/api/v1/auth/token``, gets ``{"jwt": ...}`` back, sends that token as its ``X-API-Key`` on
every later request, refreshes it before it expires, and on a 401 whose ``WWW-Authenticate``
header says ``error="invalid_token"`` fetches a new one and replays the request once. Its
``RestClient.whoami`` reads the caller's identity from the token's claims: ``sub`` (the user's
URN), ``org_id`` and ``email``.

Tokens here are HS256 JWTs (RFC 7519) signed with a server secret: random per process, or kept
in ``<checkpoint_dir>/auth.key`` (mode 0600) for a durable server, so tokens outlive a restart.
The user is ``tml:organization_user:local`` when the server accepts any key, else
``tml:organization_user:key-<first 12 hex digits of the key's SHA-256>`` (one identity per
configured key, never the key itself), with an address under the reserved ``.invalid`` domain as
its email; the organization is ``local``. A token is only as good as the key it was traded for:
it expires (``ttl_s``), and a server restarted with another key list still checks the key's
identity against it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

__all__ = ["Tokens", "looks_like_jwt", "INVALID_TOKEN_HEADER"]

USER_PREFIX = "tml:organization_user:"
"""How Tinker names a user (``whoami().user_urn``, a training run's ``model_owner``)."""
INVALID_TOKEN_HEADER = "WWW-Authenticate"
"""The header that tells the client to trade its key for a new token (RFC 6750)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def looks_like_jwt(credential: str | None) -> bool:
    """Whether ``credential`` is a JWT (three base64url parts, a JSON header) rather than a key."""
    return credential is not None and credential.startswith("eyJ") and credential.count(".") == 2


def key_user(api_key: str | None, keys_checked: bool) -> str:
    """The user URN of whoever holds ``api_key`` (module docstring)."""
    if not keys_checked or api_key is None:
        return f"{USER_PREFIX}local"
    return f"{USER_PREFIX}key-{hashlib.sha256(api_key.encode()).hexdigest()[:12]}"


class Tokens:
    """Mints and checks this server's tokens."""

    def __init__(
        self, secret: bytes, org_id: str, ttl_s: float = 3600.0, issuer: str = "skyrl-tinker"
    ) -> None:
        if len(secret) < 32:
            raise ValueError("the signing secret must be at least 32 bytes")
        self._secret = secret
        self.org_id, self.ttl_s, self.issuer = org_id, ttl_s, issuer

    @classmethod
    def for_server(cls, key_dir: str | None, org_id: str, ttl_s: float = 3600.0) -> Tokens:
        """Tokens signed with the secret in ``key_dir/auth.key`` (made on first use, mode 0600),
        or with a fresh random one when ``key_dir`` is None."""
        if key_dir is None:
            return cls(secrets.token_bytes(32), org_id, ttl_s)
        path = Path(key_dir) / "auth.key"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            secret = bytes.fromhex(path.read_text().strip())
        else:
            secret = secrets.token_bytes(32)
            with os.fdopen(fd, "w") as f:
                f.write(secret.hex())
        return cls(secret, org_id, ttl_s)

    def _sign(self, signing_input: str) -> str:
        return _b64(hmac.new(self._secret, signing_input.encode(), hashlib.sha256).digest())

    def mint(self, user: str, now: float | None = None) -> str:
        """A token for ``user`` (a URN), valid ``ttl_s`` from ``now``."""
        issued = int(time.time() if now is None else now)
        claims = {
            "iss": self.issuer,
            "sub": user,
            "org_id": self.org_id,
            "email": f"{user.removeprefix(USER_PREFIX)}@skyrl.invalid",
            "iat": issued,
            "exp": issued + int(self.ttl_s),
        }
        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{head}.{body}.{self._sign(f'{head}.{body}')}"

    def check(self, token: str, now: float | None = None) -> tuple[dict[str, Any] | None, str]:
        """``(claims, "")`` for a token this server minted that has not expired, else
        ``(None, why)``."""
        try:
            head, body, signature = token.split(".")
            header = json.loads(_unb64(head))
            claims = json.loads(_unb64(body))
        except (ValueError, UnicodeDecodeError):
            return None, "the token is not a JWT"
        if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(claims, dict):
            return None, "the token was not issued by this server"
        if not hmac.compare_digest(signature, self._sign(f"{head}.{body}")):
            return None, "the token's signature is not this server's"
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= (time.time() if now is None else now):
            return None, "the token has expired"
        return claims, ""
