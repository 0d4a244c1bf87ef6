"""`frontdesk serve`: settings checked before any worker starts, `--db` is the store whatever
`--app` builds, and the dev-only demo tokens."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from frontdesk.cli import app as cli
from frontdesk.errors import ConfigError
from frontdesk.service import RedisTokenBucket, ServiceSettings, TokenBucket, mint_token
from tests.service._server import FRONTDESK, ROOT, free_port, serve_process, wait_ready
from tests.service.conftest import SECRET

pytestmark = pytest.mark.anyio

KEYS = ("FRONTDESK_JWT_SECRET", "FRONTDESK_JWT_PUBLIC_KEY")
MASTER_KEY = base64.b64encode(b"k" * 32).decode()


def test_serve_without_a_key_says_which_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", MASTER_KEY)
    result = CliRunner().invoke(cli, ["serve", "--db", "sqlite:///x.db", "--model", "offline"])
    assert result.exit_code == 2
    assert "FRONTDESK_JWT_SECRET" in result.output and "FRONTDESK_JWT_PUBLIC_KEY" in result.output


def test_a_bad_app_is_said_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONTDESK_JWT_SECRET", SECRET)
    result = CliRunner().invoke(cli, ["serve", "--app", "nowhere:build", "--workers", "2"])
    assert result.exit_code == 2 and "cannot import 'nowhere'" in result.output


def test_demo_tokens_need_an_hs256_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTDESK_JWT_SECRET", raising=False)
    monkeypatch.setenv("FRONTDESK_JWT_PUBLIC_KEY", "-----BEGIN PUBLIC KEY-----")
    result = CliRunner().invoke(cli, ["serve", "--demo-tokens", "--model", "offline"])
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
        lines = [process.stdout.readline() for _ in range(4)]
        printed = "".join(lines)
        assert "DEV ONLY" in printed
        customer = re.search(r"customer chat: +(\S+)", printed)
        desks = re.findall(r"operator desk \((\S+)\): +(\S+)", printed)
        assert customer and len(desks) == 2  # --operators 2 by default
        assert desks[0][0] != desks[1][0]  # two operators, not one twice
        operator = re.search(r"operator desk \(\S+\): +(\S+)", printed)
        assert operator
        assert customer.group(1).startswith(f"{url}/#token=")
        assert operator.group(1).startswith(f"{url}/operator#token=")
        token = customer.group(1).split("#token=")[1]
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert httpx.get(f"{url}/operator").status_code == 200
        bearer = {"Authorization": f"Bearer {token}"}
        made = httpx.post(f"{url}/v1/conversations", json={}, headers=bearer, timeout=30)
        assert made.status_code == 201, made.text
        cid = made.json()["conversation_id"]
        r = httpx.post(
            f"{url}/v1/conversations/{cid}/messages",
            json={"text": "hello"},
            headers={**bearer, "Idempotency-Key": "m-1"},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["text"] == "You said: hello."
        assert httpx.get(f"{url}/v1/conversations/{cid}/thread").status_code == 401
        unkeyed = httpx.post(
            f"{url}/v1/conversations/{cid}/messages", json={"text": "hi"}, headers=bearer
        )
        assert unkeyed.status_code == 428


def test_the_redis_url_selects_the_shared_bucket() -> None:
    base = {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_REDIS_URL": "redis://127.0.0.1:6379/0"}
    assert isinstance(ServiceSettings.from_env(base).limiter(), RedisTokenBucket)
    del base["FRONTDESK_REDIS_URL"]
    assert isinstance(ServiceSettings.from_env(base).limiter(), TokenBucket)


@pytest.mark.parametrize("jwt_secret", [SECRET, ""])
def test_serve_without_a_master_key_exits_at_once_in_one_line_naming_it(
    tmp_path: Path, jwt_secret: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FRONTDESK_JWT_SECRET": jwt_secret}
    env.pop("FRONTDESK_MASTER_KEY", None)
    args = ["serve", "--app", "tests.service._shop:build", "--db", f"sqlite:///{tmp_path}/k.db"]
    # A server that started would never exit: the timeout catches it. It is generous
    # because the start (Python, the imports) alone takes seconds on a loaded machine.
    done = subprocess.run(
        [str(FRONTDESK), *args, "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == (1 if jwt_secret else 2), lines  # Every problem, one line each.
    assert "FRONTDESK_MASTER_KEY" in lines[0] and "--allow-clear-audit" in lines[0]
    assert jwt_secret or "FRONTDESK_JWT_SECRET" in lines[1]


def test_serve_refuses_the_offline_stand_in_unless_it_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FRONTDESK_JWT_SECRET", SECRET)
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", MASTER_KEY)
    result = CliRunner().invoke(cli, ["serve", "--db", f"sqlite:///{tmp_path}/o.db"])
    assert result.exit_code == 2 and "--model offline" in result.output


def test_serve_says_what_it_runs_one_line_each(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'lines.db'}"
    env = {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_MASTER_KEY": MASTER_KEY}
    with serve_process(["--model", "offline", "--db", db], env) as (url, process):
        assert process.stdout is not None
        lines = [process.stdout.readline().strip() for _ in range(5)]
        assert httpx.get(f"{url}/metrics").status_code == 200
    assert lines[0].startswith("models: triage=offline, request=offline, response=offline")
    assert lines[1] == f"store: {db}"
    assert lines[2] == "audit: payloads encrypted per user (master key set)"
    assert lines[3].startswith("jobs: ")
    assert lines[4] == "workers: 1"


def test_metrics_port_serves_the_scrape_apart_from_the_api(tmp_path: Path) -> None:
    port = free_port()
    db = f"sqlite:///{tmp_path / 'apart.db'}"
    args = ["--app", "tests.service._shop:build", "--db", db, "--metrics-port", str(port)]
    # What is measured here is the scrape, not the message policy: today's client behaviour.
    args += ["--allow-missing-idempotency-key", "--allow-client-conversation-ids"]
    with serve_process(args, {"FRONTDESK_JWT_SECRET": SECRET}) as (url, _process):
        r = httpx.post(
            f"{url}/v1/conversations/m-1/messages",
            json={"text": "count me"},
            headers={"Authorization": f"Bearer {mint_token(SECRET, 'u1')}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert httpx.get(f"{url}/metrics").status_code == 404  # not on the API port
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
    assert (
        'frontdesk_turns_total{frontdesk_category="COUNT",frontdesk_outcome="answered",'
        'frontdesk_profile="default",frontdesk_variant=""} 1.0'
    ) in scrape.text
    assert "gen_ai_client_token_usage_bucket" in scrape.text


def test_serve_check_lists_every_problem_at_once_and_exits_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No master key, no token key, a database that refuses: three lines, one run."""
    for key in (*KEYS, "FRONTDESK_MASTER_KEY"):
        monkeypatch.delenv(key, raising=False)
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    result = CliRunner().invoke(cli, ["serve", "--check", "--model", "offline", "--db", dead])
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines), lines
    assert "FRONTDESK_MASTER_KEY" in lines[0]
    assert "FRONTDESK_JWT_SECRET" in lines[1]
    assert "cannot reach the database" in lines[2] and "--db" in lines[2]


def test_serve_check_says_what_would_run_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FRONTDESK_JWT_SECRET", SECRET)
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", MASTER_KEY)
    db = f"sqlite:///{tmp_path / 'checked.db'}"
    result = CliRunner().invoke(cli, ["serve", "--check", "--model", "offline", "--db", db])
    assert result.exit_code == 0, result.output
    assert f"store: {db}" in result.output and "configuration OK" in result.output


@pytest.mark.parametrize("command", [["thread", "show", "c-1"], ["serve", "--check"]])
def test_a_sqlite_file_in_a_missing_folder_is_one_line_and_exit_2(
    tmp_path: Path, command: list[str]
) -> None:
    """No traceback (aiosqlite's thread once printed "Event loop is closed" first)."""
    db = f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}"
    env = {**os.environ, "FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_MASTER_KEY": MASTER_KEY}
    done = subprocess.run(
        [str(FRONTDESK), *command, "--db", db, *(["--model", "offline"] * (command[0] == "serve"))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and str(tmp_path / "nowhere") in lines[0]


def test_thread_show_of_an_unknown_conversation_exits_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'known.db'}"
    assert CliRunner().invoke(cli, ["conversations", "--db", db]).exit_code == 0
    result = CliRunner().invoke(cli, ["thread", "show", "nope", "--db", db])
    assert result.exit_code == 2
    assert "no conversation 'nope'" in result.output


def test_demo_serve_prints_a_customer_and_two_operator_urls_that_open(tmp_path: Path) -> None:
    """No key of any kind set: the potato shop on the offline stand-in, named on purpose."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for key in (*KEYS, "FRONTDESK_MASTER_KEY"):
        env.pop(key, None)
    process = subprocess.Popen(
        [str(FRONTDESK), "demo", "--serve", "--port", str(port)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process=process)
        assert process.stdout is not None
        printed = "".join(process.stdout.readline() for _ in range(7))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    customer = re.search(r"customer chat: +(\S+)", printed)
    desks = re.findall(r"operator desk \((\S+)\): +(\S+)", printed)
    assert customer and customer.group(1).startswith(f"{url}/#token="), printed
    assert [who for who, _ in desks] == ["demo-operator-1", "demo-operator-2"], printed
    assert all(desk.startswith(f"{url}/operator#token=") for _, desk in desks)
    assert "offline stand-in" in printed
