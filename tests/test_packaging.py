"""The package as users get it: the sdist and the wheel, installed beside a host application.

Builds both from a copy of the tracked files (what a fresh clone holds), installs the wheel
into a fresh venv in a temp folder, and runs a two-turn offline conversation and
`frontdesk demo` from a host app that has its own `audit/`, `prompts/`, `threads/` and
`examples/`. Nothing of the source tree is on `sys.path` there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("experts", "orchestrator", "threads", "audit", "prompts", "examples", "service", "cli")

pytestmark = [pytest.mark.package, pytest.mark.timeout(900)]

# What setuptools prints for a license table or a license classifier; no build or install
# may print it (the license is an SPDX string).
LICENSE_DEPRECATION = ("project.license", "License classifiers are deprecated")


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    log: str


@dataclass(frozen=True)
class Installed:
    python: Path
    frontdesk: Path
    host: Path
    log: str


def _run(args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command; on failure, fail the test with everything it printed."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{out}"
    return out


def _clean_env() -> dict[str, str]:
    """The caller's environment without anything that points Python at the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _tracked_copy(dest: Path) -> Path:
    """The tracked files of the work tree, as a fresh clone would hold them."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`python -m build`: the sdist, then the wheel built from that sdist."""
    base = tmp_path_factory.mktemp("build")
    source = _tracked_copy(base / "src")
    dist = base / "dist"
    log = _run([sys.executable, "-m", "build", "--outdir", dist, source], cwd=base)
    (wheel,) = dist.glob("frontdesk-*.whl")
    (sdist,) = dist.glob("frontdesk-*.tar.gz")
    return Built(wheel=wheel, sdist=sdist, log=log)


HOST_BOT = '''
"""A host bot with its own audit/, prompts/, threads/ and examples/ beside frontdesk."""
import asyncio, json, sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

import audit, examples, threads
from audit.store import HOST_STORE
from frontdesk import Category, HandlerContext, Orchestrator, Outcome, Reply
from frontdesk.errors import FrontdeskError, InvalidUserText, TurnFailed
from frontdesk.testing import FunctionModel, ModelRequest
import frontdesk, frontdesk.audit, frontdesk.prompts


class Order(BaseModel):
    variety: Literal["purple", "idaho"]
    bags: int = Field(ge=1, le=50)


async def place(request: Order, context: HandlerContext) -> Outcome:
    return Outcome(instruction=f"Confirm {request.bags} bags of {request.variety}")


async def main() -> None:
    orders = Category(name="ORDERS", description="Buying potatoes", request=Order,
                      handler=place, examples=["I'd like a bag of purple potatoes"])
    orch = Orchestrator(categories=[orders], model="offline", store="sqlite:///bot.db")
    first = await orch.handle("c-1", "I'd like a bag of purple potatoes", user_id="u-1",
                              client_message_id="m-1")
    second = await orch.handle("c-1", "make that two bags", user_id="u-1",
                               client_message_id="m-2")
    thread = await orch.user_thread("c-1", user_id="u-1")
    await orch.aclose()
    print(json.dumps({
        "replies": [[r.category, r.request.model_dump() if r.request else None, r.text]
                    for r in (first, second)],
        "thread": [m.role for m in thread.messages],
        "host": [audit.NAME, HOST_STORE, threads.NAME, examples.NAME],
        "host_prompts": sorted(p.name for p in Path("prompts").iterdir()),
        "frontdesk_files": [frontdesk.__file__, frontdesk.audit.__file__,
                            frontdesk.prompts.__file__],
        "sys_path": sys.path,
        "errors": [issubclass(InvalidUserText, FrontdeskError),
                   issubclass(TurnFailed, FrontdeskError)],
        "reply_type": Reply.__module__,
        "double": FunctionModel.__module__, "request_type": ModelRequest.__name__,
    }))


asyncio.run(main())
'''


def _host_app(host: Path) -> None:
    """A bot's folder whose own packages share frontdesk's folder names."""
    for name in ("audit", "threads", "examples"):
        (host / name).mkdir(parents=True)
        (host / name / "__init__.py").write_text(f'NAME = "host {name}"\n')
    (host / "audit" / "store.py").write_text('HOST_STORE = "the bot\'s own audit store"\n')
    (host / "prompts").mkdir()
    (host / "prompts" / "greeting.md").write_text("# Greeting\n\nHello from the bot.\n")
    (host / "prompts" / "triage.md").write_text("The bot's own triage notes, not frontdesk's.\n")
    (host / "bot.py").write_text(textwrap.dedent(HOST_BOT))


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel in a fresh venv, and a host app beside it; the repository is not used."""
    base = tmp_path_factory.mktemp("install")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    log = _run([python, "-m", "pip", "install", "-q", built.wheel], cwd=base, env=_clean_env())
    host = base / "host"
    _host_app(host)
    return Installed(python=python, frontdesk=env_dir / "bin" / "frontdesk", host=host, log=log)


def test_the_wheel_has_one_top_level_name(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = wheel.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
        top_level = wheel.read(f"{dist_info}/top_level.txt").decode().split()
    assert {n.split("/")[0] for n in names} == {"frontdesk", dist_info}
    assert top_level == ["frontdesk"]


def _package_data(folder: Path, installed_as: str) -> set[str]:
    """The tracked files of a source folder that are not Python, as wheel paths."""
    tracked = subprocess.run(
        ["git", "ls-files", str(folder.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        f"{installed_as}/{Path(p).relative_to(folder.relative_to(ROOT)).as_posix()}"
        for p in tracked
        if not p.endswith(".py")
    }


def test_the_wheel_holds_the_data_files(built: Built) -> None:
    """Prompts, versions.lock, the HTML template, the migrations: every file the code reads."""
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
    expected = {
        "frontdesk/prompts/triage.md",
        "frontdesk/prompts/request.md",
        "frontdesk/prompts/response.md",
        "frontdesk/prompts/summariser.md",
        "frontdesk/prompts/versions.lock",
        "frontdesk/audit/templates/transcript.html.j2",
        "frontdesk/migrations/env.py",
        "frontdesk/migrations/script.py.mako",
        "frontdesk/migrations/versions/0001_threads.py",
    }
    for folder in FOLDERS:
        expected |= _package_data(ROOT / folder, f"frontdesk/{folder}")
    expected |= _package_data(ROOT / "frontdesk", "frontdesk")
    versions = {
        f"frontdesk/migrations/versions/{p.name}"
        for p in (ROOT / "frontdesk" / "migrations" / "versions").glob("0*.py")
    }
    assert versions and versions <= names
    assert sorted(expected - names) == []


def test_the_wheel_holds_the_cli_and_its_console_script(built: Built) -> None:
    """`cli/` installs as `frontdesk.cli`, and the `frontdesk` script runs its `main`."""
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()
    modules = {f"frontdesk/cli/{p.name}" for p in (ROOT / "cli").glob("*.py")}
    assert "frontdesk/cli/__init__.py" in modules and "frontdesk/cli/_options.py" in modules
    assert sorted(modules - names) == []
    assert not [n for n in names if n.startswith("frontdesk/orchestrator/") and "cli" in n]
    assert "frontdesk = frontdesk.cli:main" in scripts


def test_the_sdist_holds_the_sources_and_the_data(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in (
        "pyproject.toml",
        "README.md",
        "prompts/triage.md",
        "prompts/versions.lock",
        "audit/templates/transcript.html.j2",
        "frontdesk/migrations/script.py.mako",
        "orchestrator/turn.py",
    ):
        assert needed in names


def test_no_build_or_install_prints_the_license_deprecation(
    built: Built, installed: Installed
) -> None:
    for log in (built.log, installed.log):
        assert not [m for m in LICENSE_DEPRECATION if m in log], log


def test_a_host_app_runs_two_offline_turns_from_the_wheel(installed: Installed) -> None:
    out = _run([installed.python, "bot.py"], cwd=installed.host, env=_clean_env())
    seen = json.loads(out.strip().splitlines()[-1])
    first, second = seen["replies"]
    assert first[:2] == ["ORDERS", {"variety": "purple", "bags": 1}]
    assert second[:2] == ["ORDERS", {"variety": "purple", "bags": 2}]
    assert first[2].startswith("[offline]") and second[2].startswith("[offline]")
    assert seen["thread"] == ["user", "assistant", "user", "assistant"]
    # The host's own packages are the host's; frontdesk's are frontdesk's.
    assert seen["host"] == [
        "host audit",
        "the bot's own audit store",
        "host threads",
        "host examples",
    ]
    assert seen["host_prompts"] == ["greeting.md", "triage.md"]
    site = installed.python.parents[1]
    for path in seen["frontdesk_files"]:
        assert Path(path).is_relative_to(site), path
    # The wheel install needs no source tree: the repository is nowhere on sys.path.
    assert not [p for p in seen["sys_path"] if p and Path(p).resolve().is_relative_to(ROOT)]
    assert seen["errors"] == [True, True]
    assert seen["reply_type"].startswith("frontdesk.")
    assert seen["double"].startswith("frontdesk.")


def test_frontdesk_demo_runs_from_the_wheel_without_a_tty(installed: Installed) -> None:
    """stdin closed, output piped: the demo runs to the end and exits 0."""
    out = _run([installed.frontdesk, "demo"], cwd=installed.host, env=_clean_env())
    assert "frontdesk thread show demo-" in out
    found = re.search(r"--db sqlite:///(\S+)", out)  # A fresh database for each run.
    assert found is not None and Path(found.group(1)).exists(), out
