"""Auth and isolation: every /v1 route needs a valid bearer JWT; the user is its `sub`."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from frontdesk.errors import ConfigError, InvalidToken
from frontdesk.service import TokenVerifier
from tests.service.conftest import SECRET, Api, auth, token

pytestmark = pytest.mark.anyio


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def alg_none_token(user: str) -> str:
    header = b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": user, "exp": int(time.time()) + 600}).encode())
    return f"{header}.{claims}."


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


BAD_TOKENS = {
    "garbage": "not-a-jwt",
    "forged": jwt.encode(
        {"sub": "u1", "exp": int(time.time()) + 600}, "another-secret-" * 3, algorithm="HS256"
    ),
    "expired": jwt.encode({"sub": "u1", "exp": int(time.time()) - 5}, SECRET, algorithm="HS256"),
    "no-exp": jwt.encode({"sub": "u1"}, SECRET, algorithm="HS256"),
    "no-sub": jwt.encode({"exp": int(time.time()) + 600}, SECRET, algorithm="HS256"),
    "alg-none": alg_none_token("u1"),
    "hs512": jwt.encode(
        {"sub": "u1", "exp": int(time.time()) + 600}, SECRET * 2, algorithm="HS512"
    ),
}


@pytest.fixture(params=["sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'auth.db'}"


ROUTES = [
    ("POST", "/v1/conversations/c1/messages", {"text": "hi"}),
    ("GET", "/v1/conversations/c1/thread", None),
    ("GET", "/v1/conversations/c1/transcript", None),
    ("POST", "/v1/conversations/c1/messages/m1/edit", {"text": "hi"}),
    ("POST", "/v1/conversations/c1/messages/m1/regenerate", None),
]


@pytest.mark.parametrize("method,path,body", ROUTES)
async def test_no_token_is_401(api: Api, method: str, path: str, body: object) -> None:
    r = await api.client.request(method, path, json=body)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("name", sorted(BAD_TOKENS))
async def test_a_bad_token_is_401_and_nothing_is_stored(api: Api, name: str) -> None:
    r = await api.client.post(
        "/v1/conversations/c-bad/messages", json={"text": "hi"}, headers=bearer(BAD_TOKENS[name])
    )
    assert r.status_code == 401, (name, r.text)
    assert await api.orch.store.conversation("c-bad") is None


async def test_a_basic_scheme_is_401(api: Api) -> None:
    r = await api.client.get("/v1/conversations/c1/thread", headers={"Authorization": "Basic dTpw"})
    assert r.status_code == 401


async def test_the_user_is_the_sub_never_a_body_field(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hi", "user_id": "mallory"},
        headers=auth("alice"),
    )
    assert r.status_code == 422  # unknown body fields are refused outright
    ok = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "hi"}, headers=auth("alice")
    )
    assert ok.status_code == 200
    conversation = await api.orch.store.conversation(cid)
    assert conversation is not None and conversation.user_id == "alice"


async def test_another_users_conversation_is_404_like_a_missing_one(api: Api) -> None:
    cid = api.cid()
    first = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "mine"}, headers=auth("alice")
    )
    ids = first.json()
    missing = api.cid()
    for path, body in [
        ("/v1/conversations/{}/messages", {"text": "let me in"}),
        (f"/v1/conversations/{{}}/messages/{ids['user_message_id']}/edit", {"text": "x"}),
        (f"/v1/conversations/{{}}/messages/{ids['message_id']}/regenerate", None),
    ]:
        theirs = await api.client.post(path.format(cid), json=body, headers=auth("bob"))
        nobody = await api.client.post(path.format(missing), json=body, headers=auth("bob"))
        assert theirs.status_code == 404, path
        if "/messages/" in path:  # a message id of another conversation: the same answer
            assert nobody.status_code == 404
            assert nobody.json() == theirs.json()
    missing = api.cid()  # (bob's first post above started the other one)
    for what in ("thread", "transcript"):
        theirs = await api.client.get(f"/v1/conversations/{cid}/{what}", headers=auth("bob"))
        nobody = await api.client.get(f"/v1/conversations/{missing}/{what}", headers=auth("bob"))
        assert theirs.status_code == nobody.status_code == 404
        assert theirs.json() == nobody.json()
    transcript = await api.orch.transcript(cid, user_id="alice")
    assert [m.content for m in transcript] == ["mine", "You said: mine."]


async def test_an_operator_reads_any_conversation(api: Api) -> None:
    cid = api.cid()
    await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "mine"}, headers=auth("alice")
    )
    r = await api.client.get(
        f"/v1/conversations/{cid}/transcript", headers=auth("op", roles=("operator",))
    )
    assert r.status_code == 200 and len(r.json()["messages"]) == 2


def test_rs256_tokens_are_checked_with_the_public_key(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    path = tmp_path / "public.pem"
    path.write_text(pem)
    for value in (pem, str(path)):
        verifier = TokenVerifier.from_env({"FRONTDESK_JWT_PUBLIC_KEY": value})
        good = jwt.encode(
            {"sub": "u1", "exp": int(time.time()) + 60, "roles": ["operator"]},
            key,
            algorithm="RS256",
        )
        principal = verifier.verify(good)
        assert principal.user_id == "u1" and principal.is_operator
        # The public key used as an HMAC secret (the key-confusion trick) is refused.
        with pytest.raises(InvalidToken):
            verifier.verify(token("u1"))
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode({"sub": "u1", "exp": int(time.time()) + 60}, other, algorithm="RS256")
        with pytest.raises(InvalidToken):
            verifier.verify(forged)


def test_a_verifier_needs_a_key_and_a_long_secret() -> None:
    with pytest.raises(ConfigError, match="FRONTDESK_JWT_SECRET"):
        TokenVerifier.from_env({})
    with pytest.raises(ConfigError, match="at least 32"):
        TokenVerifier(secret="short")
    with pytest.raises(ConfigError, match="PEM"):
        TokenVerifier(public_key="-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----")


def test_audience_and_issuer_are_checked_when_set() -> None:
    verifier = TokenVerifier(secret=SECRET, audience="frontdesk", issuer="https://id.example")
    claims = {"sub": "u1", "exp": int(time.time()) + 60}
    with pytest.raises(InvalidToken):
        verifier.verify(jwt.encode(claims, SECRET, algorithm="HS256"))
    good = {**claims, "aud": "frontdesk", "iss": "https://id.example"}
    assert verifier.verify(jwt.encode(good, SECRET, algorithm="HS256")).user_id == "u1"


def test_roles_may_be_a_list_or_a_space_separated_string() -> None:
    verifier = TokenVerifier(secret=SECRET)
    for roles in (["operator", "x"], "x operator"):
        claims = {"sub": "u1", "exp": int(time.time()) + 60, "roles": roles}
        assert verifier.verify(jwt.encode(claims, SECRET, algorithm="HS256")).is_operator
    plain = verifier.verify(token("u1"))
    assert not plain.is_operator and plain.roles == frozenset()


def _signed(claims: dict[str, object]) -> str:
    return jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    "claims",
    [
        # Expiries are seconds from the moment the test runs (collection is
        # minutes earlier in a full run, which would shrink "over 24 h").
        pytest.param({"sub": "u1", "exp": ("str", 600)}, id="exp-numeric-string"),
        pytest.param({"sub": "u1", "exp": True}, id="exp-bool"),
        pytest.param({"sub": "u1", "exp": ("int", 31 * 365 * 86400)}, id="31-years"),
        pytest.param({"sub": "u1", "exp": ("int", 86400 + 120)}, id="over-24h"),
        pytest.param({"sub": "erased:" + "0" * 32, "exp": ("int", 600)}, id="erased"),
        pytest.param({"sub": "erased:anything", "exp": ("int", 600)}, id="erased-2"),
        pytest.param({"sub": "u\x001", "exp": ("int", 600)}, id="sub-nul"),
    ],
)
async def test_tokens_a_bank_review_found_accepted_are_refused(
    api: Api, claims: dict[str, object]
) -> None:
    exp = claims["exp"]
    if isinstance(exp, tuple):
        kind, ahead = exp
        at = int(time.time()) + ahead
        claims = {**claims, "exp": str(at) if kind == "str" else at}
    r = await api.client.get("/v1/me/memories", headers=bearer(_signed(claims)))
    assert r.status_code == 401, r.text
    assert r.json()["type"] == "InvalidToken"


def test_the_lifetime_maximum_is_configurable() -> None:
    long_lived = _signed({"sub": "u1", "exp": int(time.time()) + 7 * 86400})
    with pytest.raises(InvalidToken, match="maximum"):
        TokenVerifier(secret=SECRET).verify(long_lived)
    assert TokenVerifier(secret=SECRET, max_lifetime=8 * 86400).verify(long_lived).user_id == "u1"
    env = {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_MAX_TOKEN_LIFETIME": "0"}
    assert TokenVerifier.from_env(env).verify(long_lived).user_id == "u1"
    with pytest.raises(ConfigError, match="FRONTDESK_MAX_TOKEN_LIFETIME"):
        TokenVerifier.from_env({**env, "FRONTDESK_MAX_TOKEN_LIFETIME": "1d"})
    day = _signed({"sub": "u1", "exp": int(time.time()) + 86400 - 60})
    assert TokenVerifier(secret=SECRET).verify(day).user_id == "u1"


async def test_an_erased_users_marker_token_cannot_read_her_conversation(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hello"},
        headers={**auth("gone"), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 200, r.text
    officer = auth("op", roles=("operator", "privacy"))
    erased = await api.client.post("/v1/users/gone/erase", headers=officer)
    assert erased.status_code == 200, erased.text
    conversation = await api.orch.store.conversation(cid)
    assert conversation is not None and conversation.user_id is not None
    assert conversation.user_id.startswith("erased:")
    forged = _signed({"sub": conversation.user_id, "exp": int(time.time()) + 600})
    for path in ("transcript", "thread"):
        r = await api.client.get(f"/v1/conversations/{cid}/{path}", headers=bearer(forged))
        assert r.status_code == 401, r.text
