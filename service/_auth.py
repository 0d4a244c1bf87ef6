"""Bearer JWTs: who is calling (`sub`) and whether they are an operator (`roles`).

Algorithms are pinned by the key the service holds: HS256 with `FRONTDESK_JWT_SECRET`,
RS256 with `FRONTDESK_JWT_PUBLIC_KEY` (PEM text, or a path to a PEM file). A token whose
header names any other algorithm (`none` included) is refused before its signature is
looked at, and every token must carry `exp` and `sub`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import RSAAlgorithm

from frontdesk.errors import ConfigError, InvalidToken

OPERATOR_ROLE = "operator"
"""The `roles` claim value the operator routes ask for."""
PRIVACY_ROLE = "privacy"
"""The `roles` claim value erasing a user asks for (besides `operator`)."""
REVEAL_ROLE = "reveal"
"""The `roles` claim value seeing ruled values (`Redact`) on the operator routes asks for
(`?reveal=true`, besides `operator`)."""

ERASED_SUB_PREFIX = "erased:"
"""The reserved `sub` form: what an erased user's conversations are owned by. No token
naming it is accepted, so an erased conversation cannot be read or written by anyone."""
DEFAULT_MAX_TOKEN_LIFETIME = 24 * 3600.0
"""Tokens valid for longer than this (from now) are refused: a stolen one stays useful for
at most a day. `--max-token-lifetime` changes it."""

HS256 = "HS256"
RS256 = "RS256"
_MIN_SECRET_BYTES = 32
_RSA = RSAAlgorithm(RSAAlgorithm.SHA256)
_MAX_SUB_LENGTH = 255  # What the store keeps as a user id.


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Principal:
    """The caller, as the verified token says."""

    user_id: str
    """The token's `sub` claim: the conversations' owner id (never a field of a body)."""
    roles: frozenset[str] = field(default_factory=frozenset)
    profiles: frozenset[str] | None = None
    """An operator's `profiles` claim: the businesses whose conversations they see and act
    on (`None`: every one)."""
    queues: frozenset[str] | None = None
    """An operator's `queues` claim: the hand-off reasons they serve (`None`: every one)."""
    profile: str | None = None
    """A customer's `profile` claim: the business their conversations are answered by
    (`None`: the deployment's first)."""

    @property
    def is_operator(self) -> bool:
        """Whether the token's `roles` claim holds `"operator"`."""
        return OPERATOR_ROLE in self.roles

    @property
    def is_privacy(self) -> bool:
        """Whether the token's `roles` claim holds `"privacy"` (erasing a user)."""
        return PRIVACY_ROLE in self.roles

    @property
    def is_revealer(self) -> bool:
        """Whether the token's `roles` claim holds `"reveal"` (`?reveal=true`)."""
        return REVEAL_ROLE in self.roles

    def sees(self, profile: str, reason: str | None = None) -> bool:
        """Whether this operator may see and act on a conversation of `profile` (handed
        off for `reason`, if it is)."""
        if self.profiles is not None and profile not in self.profiles:
            return False
        return reason is None or self.queues is None or reason in self.queues


def _roles(claim: Any) -> frozenset[str]:
    """`roles` as a list of strings, or one space-separated string (OAuth `scope` style)."""
    if isinstance(claim, str):
        return frozenset(claim.split())
    if isinstance(claim, list | tuple):
        return frozenset(r for r in claim if isinstance(r, str))
    return frozenset()


class TokenVerifier:
    """Checks bearer tokens against the service's key(s).

    Args:
        secret: The HS256 shared secret (at least 32 bytes).
        public_key: The RS256 public key, PEM.
        audience: When set, tokens must carry this `aud`.
        issuer: When set, tokens must carry this `iss`.
        leeway: Seconds of clock skew allowed on `exp` / `nbf` / `iat`.
        max_lifetime: Refuse a token whose `exp` is more than this many seconds ahead
            (`None`: no maximum).

    Raises:
        ConfigError: neither key is given, or the secret is too short to be safe.
    """

    def __init__(
        self,
        *,
        secret: str | None = None,
        public_key: str | None = None,
        audience: str | None = None,
        issuer: str | None = None,
        leeway: float = 0.0,
        max_lifetime: float | None = DEFAULT_MAX_TOKEN_LIFETIME,
    ) -> None:
        keys: dict[str, Any] = {}
        if secret:
            if len(secret.encode()) < _MIN_SECRET_BYTES:
                raise ConfigError(
                    f"FRONTDESK_JWT_SECRET is {len(secret.encode())} bytes; use at least "
                    f"{_MIN_SECRET_BYTES} random bytes (e.g. `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'`)"
                )
            keys[HS256] = secret
        if public_key:
            try:
                key = _RSA.prepare_key(public_key)
            except (ValueError, TypeError, jwt.InvalidKeyError) as e:
                raise ConfigError(
                    f"FRONTDESK_JWT_PUBLIC_KEY is not an RSA public key in PEM form: {e}"
                ) from None
            keys[RS256] = key.public_key() if isinstance(key, RSAPrivateKey) else key
        if not keys:
            raise ConfigError(
                "the service needs a key to check bearer tokens: set FRONTDESK_JWT_SECRET "
                "(HS256) or FRONTDESK_JWT_PUBLIC_KEY (RS256, PEM text or a file path)"
            )
        self._keys = keys
        self.audience = audience
        self.issuer = issuer
        self.leeway = leeway
        self.max_lifetime = max_lifetime

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms accepted (those the service holds a key for)."""
        return tuple(sorted(self._keys))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenVerifier:
        """From `FRONTDESK_JWT_SECRET`, `FRONTDESK_JWT_PUBLIC_KEY`, `FRONTDESK_JWT_AUDIENCE`,
        `FRONTDESK_JWT_ISSUER`, `FRONTDESK_MAX_TOKEN_LIFETIME` (seconds, `0`: no maximum).

        Raises:
            ConfigError: no key set, a short secret, a public key file that cannot be read,
                a lifetime that is not a number of seconds.
        """
        env = os.environ if environ is None else environ
        raw_lifetime = env.get("FRONTDESK_MAX_TOKEN_LIFETIME") or str(
            int(DEFAULT_MAX_TOKEN_LIFETIME)
        )
        if not raw_lifetime.isdigit():
            raise ConfigError(
                f"FRONTDESK_MAX_TOKEN_LIFETIME={raw_lifetime!r}: expected whole seconds "
                "(0 for no maximum)"
            )
        public_key = env.get("FRONTDESK_JWT_PUBLIC_KEY") or None
        if public_key and "-----BEGIN" not in public_key:
            try:
                public_key = Path(public_key).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(
                    f"FRONTDESK_JWT_PUBLIC_KEY is neither PEM text nor a readable file: {e}"
                ) from None
        return cls(
            secret=env.get("FRONTDESK_JWT_SECRET") or None,
            public_key=public_key,
            audience=env.get("FRONTDESK_JWT_AUDIENCE") or None,
            issuer=env.get("FRONTDESK_JWT_ISSUER") or None,
            max_lifetime=float(raw_lifetime) or None,
        )

    def verify(self, token: str) -> Principal:
        """The caller named by a valid token.

        Raises:
            InvalidToken: malformed, a header algorithm without a key here (`none`
                included), a bad signature, expired, not yet valid, no `exp` or `sub`, or
                the wrong audience or issuer, an `exp`, `nbf` or `iat` that is not a number,
                an `exp` further ahead than `max_lifetime`, a `sub` that is not a storable
                id or has the reserved `erased:` form. The message says which, never the
                token.
        """
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the bearer token is not a JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._keys:
            accepted = ", ".join(self.algorithms)
            raise InvalidToken(f"the token's algorithm {alg!r} is not accepted (only {accepted})")
        options: dict[str, Any] = {"require": ["exp", "sub"]}
        try:
            claims = jwt.decode(
                token,
                self._keys[alg],
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options=options,  # type: ignore[arg-type]
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.PyJWTError as e:
            raise InvalidToken(f"the token is invalid: {e}") from None
        for claim in ("exp", "nbf", "iat"):
            value = claims.get(claim)
            if claim in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise InvalidToken(f"the token's `{claim}` claim must be a number (NumericDate)")
        lifetime = float(claims["exp"]) - time.time()
        if self.max_lifetime is not None and lifetime > self.max_lifetime + self.leeway:
            raise InvalidToken(
                f"the token is valid for {lifetime:.0f} s, more than this service's maximum "
                f"of {self.max_lifetime:.0f} s; issue shorter-lived tokens"
            )
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip():
            raise InvalidToken("the token's `sub` claim must name the user")
        if sub.startswith(ERASED_SUB_PREFIX):
            raise InvalidToken("the token's `sub` has the reserved `erased:` form")
        if "\x00" in sub or len(sub) > _MAX_SUB_LENGTH or not _encodable(sub):
            raise InvalidToken(
                f"the token's `sub` must be 1 to {_MAX_SUB_LENGTH} characters of valid "
                "Unicode without NUL"
            )
        profile = claims.get("profile")
        if profile is not None and (not isinstance(profile, str) or not profile):
            raise InvalidToken("the token's `profile` claim must be a profile name")
        return Principal(
            user_id=sub,
            roles=_roles(claims.get("roles")),
            profiles=None if "profiles" not in claims else _roles(claims["profiles"]),
            queues=None if "queues" not in claims else _roles(claims["queues"]),
            profile=profile,
        )


def mint_token(
    secret: str,
    user_id: str,
    *,
    roles: Iterable[str] = (),
    ttl: float = 3600.0,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """An HS256 token for `user_id`, valid `ttl` seconds (development and tests only).

    Production tokens come from the embedding site's identity provider.
    """
    now = int(time.time())
    claims: dict[str, Any] = {"sub": user_id, "iat": now, "exp": now + int(ttl)}
    if roles:
        claims["roles"] = list(roles)
    claims.update(extra or {})
    return jwt.encode(claims, secret, algorithm=HS256)
