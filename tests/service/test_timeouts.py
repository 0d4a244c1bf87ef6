"""Slow clients are cut off (real HTTP through uvicorn with `BoundedH11Protocol`): a header
line every 0.3 s, or a body at 50 B/s, gets 408 and a closed connection within the
configured second, while other requests keep being answered at once; connections over the
cap are answered 503."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from frontdesk.service import TokenVerifier, create_app
from frontdesk.service._timeouts import BoundedH11Protocol
from tests.service import _shop
from tests.service._server import free_port, wait_ready
from tests.service.conftest import SECRET

TIMEOUT = 1.0
MAX_CONNECTIONS = 8


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("FRONTDESK_HEADER_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("FRONTDESK_BODY_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("FRONTDESK_MAX_CONNECTIONS", str(MAX_CONNECTIONS))
    app = create_app(
        _shop.build(f"sqlite:///{tmp_path / 't.db'}"),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
    )
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", http=BoundedH11Protocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _drip(
    sock: socket.socket, first: bytes, chunks: Iterator[bytes], every: float
) -> tuple[float, bytes]:
    """Send `first`, then a chunk every `every` s until the server closes; returns how
    long the connection stayed open and what the server said."""
    start = time.monotonic()
    sock.sendall(first)
    sock.settimeout(every)
    answer = b""
    for chunk in chunks:
        try:
            data = sock.recv(4096)
            if not data:
                break
            answer += data
        except TimeoutError:
            pass
        except OSError:  # Reset: the server closed while our bytes were still coming.
            break
        try:
            sock.sendall(chunk)
        except OSError:
            break
        if time.monotonic() - start > 20:
            break
    sock.settimeout(5)
    try:
        while data := sock.recv(4096):
            answer += data
    except OSError:
        pass
    return time.monotonic() - start, answer


def _latencies(url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            start = time.monotonic()
            assert client.get("/healthz").status_code == 200
            out.append(time.monotonic() - start)
            time.sleep(0.05)


def _header_lines() -> Iterator[bytes]:
    i = 0
    while True:
        i += 1
        yield f"X-Slow-{i}: {i}\r\n".encode()


def _body_bytes() -> Iterator[bytes]:
    while True:
        yield b"x" * 15


@pytest.mark.parametrize("kind", ["headers", "body"])
def test_a_slow_client_is_cut_off_while_others_are_answered(url: str, kind: str) -> None:
    stop, latencies = threading.Event(), list[float]()
    others = threading.Thread(target=_latencies, args=(url, stop, latencies))
    others.start()
    try:
        with _connect(url) as sock:
            if kind == "headers":
                open_for, answer = _drip(
                    sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", _header_lines(), 0.3
                )
            else:
                head = (
                    b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                )
                open_for, answer = _drip(sock, head, _body_bytes(), 0.3)
    finally:
        stop.set()
        others.join()
    # The 408 is written before the close; a reset (our unread bytes) may drop it.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert answer == b"" or b"RequestTimeout" in answer
    assert TIMEOUT * 0.9 <= open_for < TIMEOUT + 2.0
    assert len(latencies) >= 5
    assert max(latencies) < 1.0  # The slow client never held the others up.


def test_connections_over_the_cap_are_answered_503(url: str) -> None:
    idle = [_connect(url) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)
        with _connect(url) as extra:
            extra.settimeout(5)
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"retry-after: 1" in answer.lower()
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200


def test_idle_connections_are_closed_after_the_header_timeout(url: str) -> None:
    with _connect(url) as sock:
        start = time.monotonic()
        sock.settimeout(TIMEOUT + 5)
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - start < TIMEOUT + 2.0
