"""Fixtures for the model layer: the scripted wire server and a fake clock."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.experts.providers.wire_server import WireServer


class FakeClock:
    """A monotonic clock whose `sleep` advances time instead of waiting."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return time.monotonic() + self.offset

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.offset += seconds


@pytest.fixture(scope="session")
def _wire_server() -> Iterator[WireServer]:
    server = WireServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def wire(_wire_server: WireServer, allow_model_requests: None) -> Iterator[WireServer]:
    """The wire server, reset for this test, with real model requests allowed."""
    _wire_server.reset()
    yield _wire_server
    _wire_server.reset()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
