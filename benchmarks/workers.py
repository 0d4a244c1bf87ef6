"""How fast `frontdesk serve --workers 2` replaces a killed worker: SIGKILL one worker,
time until a new worker process is answering, `--kills` times, with and without load.

    python -m benchmarks.workers --kills 20

Prints the worst and median replacement time for each; the target is a few seconds (the
supervisor's health-check wait, `WORKER_HEALTHCHECK_SECONDS`, bounds it).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from frontdesk.service._factory import WORKER_HEALTHCHECK_SECONDS
from tests.service._server import free_port, wait_ready


def _children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _workers(supervisor: int) -> set[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    found = set()
    for pid in _children(supervisor):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline:
            found.add(pid)
    return found


def _load(url: str, stop: threading.Event, stalls: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            start = time.monotonic()
            try:
                client.get("/readyz")
            except httpx.HTTPError:
                pass
            stalls.append(time.monotonic() - start)


def _replacement(url: str, supervisor: int, load: bool) -> float:
    before = _workers(supervisor)
    victim = sorted(before)[0]
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    while True:
        now = _workers(supervisor)
        fresh = now - before
        if fresh and victim not in now:
            break
        if time.monotonic() - start > 180:
            raise RuntimeError("no replacement in 180 s")
        time.sleep(0.05)
    # Replaced once the new worker answers: /readyz is served by whichever accepts, so
    # wait until both workers have answered.
    seen: set[str] = set()
    while len(seen) < 2 and time.monotonic() - start < 180:
        try:
            seen.add(httpx.get(f"{url}/healthz", timeout=5).headers["X-Frontdesk-Worker"])
        except httpx.HTTPError:
            pass
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {
            **os.environ,
            "FRONTDESK_JWT_SECRET": "s" * 40,
            "FRONTDESK_RATE_LIMIT": "off",
            "PYTHONPATH": str(root),
        }
        frontdesk = Path(sys.executable).parent / "frontdesk"
        serve = subprocess.Popen(
            [
                str(frontdesk),
                "serve",
                "--workers",
                "2",
                "--port",
                str(port),
                "--db",
                f"sqlite:///{tmp}/w.db",
                "--app",
                "tests.service._shop:build",
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=root,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process=serve)
            time.sleep(3)
            print(f"WORKER_HEALTHCHECK_SECONDS = {WORKER_HEALTHCHECK_SECONDS}")
            for load in (False, True):
                stop, stalls = threading.Event(), list[float]()
                loaders = (
                    [threading.Thread(target=_load, args=(url, stop, stalls)) for _ in range(4)]
                    if load
                    else []
                )
                for t in loaders:
                    t.start()
                times = []
                for _ in range(args.kills):
                    times.append(_replacement(url, serve.pid, load))
                    time.sleep(0.5)
                stop.set()
                for t in loaders:
                    t.join()
                name = "with load" if load else "idle"
                extra = f", longest request {max(stalls):.2f} s" if stalls else ""
                print(
                    f"{name}: {len(times)} kills, worst {max(times):.2f} s, "
                    f"median {statistics.median(times):.2f} s{extra}"
                )
        finally:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(timeout=30)


if __name__ == "__main__":
    main()
