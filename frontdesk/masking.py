"""Mask credentials before a text is printed, logged, stored or chained to an exception.

A model spec may name a server with credentials in its URL (`openai:NAME@http://user:pw@host`),
a store URL may carry a database password, and a provider may echo an API key in an error
body. Those texts end up in log lines, audit rows, exports and exception messages, so each
place that shows one passes it through here first.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "mask_url", "scrub"]

MASK = "***"
"""What a masked secret is shown as."""

# `scheme://user:password@` in free text: the password part is masked.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/?#:@]*:)[^\s/?#@]*@")
# Query parameters that carry secrets, e.g. `?api_key=...`.
_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|secret|password|sig|signature)=)[^&#\s]+"
)
# API keys and bearer tokens as the providers issue them (`sk-...`, `sk-ant-...`).
_KEY_LIKE = re.compile(r"\b(sk-(?:ant-|proj-)?)[A-Za-z0-9_\-]{12,}")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{12,}=*")


def mask_url(url: str) -> str:
    """`url` with its password (and any secret-looking query parameter) masked.

    `http://user:pw@host/v1` becomes `http://user:***@host/v1`; a URL without credentials
    comes back unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else f"{userinfo}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [(k, MASK if _SECRET_PARAM.match(f"?{k}=x") else v) for k, v in pairs]
        if masked != pairs:
            query = urlencode(masked, safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str) -> str:
    """`text` with URL passwords, secret query parameters, API keys and bearer tokens masked."""
    text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    text = _SECRET_PARAM.sub(rf"\1{MASK}", text)
    text = _KEY_LIKE.sub(rf"\1{MASK}", text)
    return _BEARER.sub(rf"\1{MASK}", text)
