"""`frontdesk serve`: settings checked before any worker starts, `--db` is the store whatever
`--app` builds, and the dev-only demo tokens."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from frontdesk.cli import app as cli
from frontdesk.errors import ConfigError
from frontdesk.service import RedisTokenBucket, ServiceSettings, TokenBucket
from tests.service._server import serve_process
from tests.service.conftest import SECRET

pytestmark = pytest.mark.anyio

KEYS = ("FRONTDESK_JWT_SECRET", "FRONTDESK_JWT_PUBLIC_KEY")


def test_serve_without_a_key_says_which_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(cli, ["serve", "--db", "sqlite:///x.db"])
    assert result.exit_code == 2
    assert "FRONTDESK_JWT_SECRET" in result.output and "FRONTDESK_JWT_PUBLIC_KEY" in result.output


def test_a_bad_app_is_said_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONTDESK_JWT_SECRET", SECRET)
    result = CliRunner().invoke(cli, ["serve", "--app", "nowhere:build", "--workers", "2"])
    assert result.exit_code == 2 and "cannot import 'nowhere'" in result.output


def test_demo_tokens_need_an_hs256_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTDESK_JWT_SECRET", raising=False)
    monkeypatch.setenv("FRONTDESK_JWT_PUBLIC_KEY", "-----BEGIN PUBLIC KEY-----")
    result = CliRunner().invoke(cli, ["serve", "--demo-tokens"])
    assert result.exit_code == 2 and "--demo-tokens mints HS256 tokens" in result.output


@pytest.mark.parametrize("spec", ["tests.service._shop:build", "tests.service._shop:INSTANCE"])
async def test_db_is_the_store_whatever_the_app_builds(tmp_path: Path, spec: str) -> None:
    url = f"sqlite:///{tmp_path / 'given.db'}"
    settings = ServiceSettings.from_env(
        {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_SERVE_APP": spec, "FRONTDESK_SERVE_DB": url}
    )
    orch = settings.orchestrator()
    await orch.open()
    try:
        assert orch.store.engine.url.database == str(tmp_path / "given.db")
    finally:
        await orch.aclose()


def test_settings_are_checked() -> None:
    base = {"FRONTDESK_JWT_SECRET": SECRET}
    with pytest.raises(ConfigError, match="FRONTDESK_MAX_BODY_BYTES"):
        ServiceSettings.from_env({**base, "FRONTDESK_MAX_BODY_BYTES": "12"})
    with pytest.raises(ConfigError, match="FRONTDESK_RATE_LIMIT"):
        ServiceSettings.from_env({**base, "FRONTDESK_RATE_LIMIT": "fast"})
    assert ServiceSettings.from_env({**base, "FRONTDESK_RATE_LIMIT": "off"}).limiter() is None


def test_demo_tokens_open_the_pages_and_the_api(tmp_path: Path) -> None:
    """No key set: --demo-tokens makes a secret for the run and prints two page URLs."""
    env = {"FRONTDESK_JWT_SECRET": "", "FRONTDESK_JWT_PUBLIC_KEY": ""}
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    args = ["--demo-tokens", "--db", db, "--app", "tests.service._shop:build"]
    with serve_process(args, env) as (url, process):
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        printed = "".join(lines)
        assert "DEV ONLY" in printed
        customer = re.search(r"customer chat: +(\S+)", printed)
        operator = re.search(r"operator console: +(\S+)", printed)
        assert customer and operator
        assert customer.group(1).startswith(f"{url}/#token=")
        assert operator.group(1).startswith(f"{url}/operator#token=")
        token = customer.group(1).split("#token=")[1]
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert httpx.get(f"{url}/operator").status_code == 200
        r = httpx.post(
            f"{url}/v1/conversations/demo-1/messages",
            json={"text": "hello"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["text"] == "You said: hello."
        assert httpx.get(f"{url}/v1/conversations/demo-1/thread").status_code == 401


def test_the_redis_url_selects_the_shared_bucket() -> None:
    base = {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_REDIS_URL": "redis://127.0.0.1:6379/0"}
    assert isinstance(ServiceSettings.from_env(base).limiter(), RedisTokenBucket)
    del base["FRONTDESK_REDIS_URL"]
    assert isinstance(ServiceSettings.from_env(base).limiter(), TokenBucket)
