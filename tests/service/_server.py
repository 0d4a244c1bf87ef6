"""Run the service for a test: `frontdesk serve` as a subprocess, or uvicorn in a thread."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from frontdesk.service import WORKER_HEADER

ROOT = Path(__file__).resolve().parents[2]
FRONTDESK = Path(sys.executable).parent / "frontdesk"
MASTER_KEY = "dGVzdC1tYXN0ZXIta2V5LW9mLTMyLWJ5dGVzLS0tLS0="
"""A master key for the served app (base64 of 32 bytes): `serve` refuses to start without one."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    url: str, *, timeout: float = 60.0, process: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            out = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"frontdesk serve exited {process.returncode}:\n{out}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout} s")


def wait_workers(url: str, count: int, *, timeout: float = 60.0) -> None:
    """Until `count` different workers have answered `/healthz` (new connections each)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} of {count} workers answered"
        seen.add(httpx.get(f"{url}/healthz", timeout=5.0).headers[WORKER_HEADER])
        time.sleep(0.02)


@contextlib.contextmanager
def serve_process(
    args: list[str], env: dict[str, str], *, workers: int = 1
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`frontdesk serve ARGS --port P`; yields its URL once `/readyz` answers 200 and
    `workers` workers have answered."""
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FRONTDESK_MASTER_KEY": MASTER_KEY,
        **env,
    }
    process = subprocess.Popen(
        [
            str(FRONTDESK),
            "serve",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process=process)
        wait_workers(url, workers)
        yield url, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def serve_thread(app: FastAPI) -> Iterator[str]:
    """uvicorn serving `app` on a thread of its own (its own event loop); yields the URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=20)
