"""uvicorn's worker supervisor, with a health check that notices a dead worker at once.

uvicorn's `Multiprocess` pings each worker in turn and waits up to
`timeout_worker_healthcheck` for its answer. A worker killed while a ping waits never
answers and sends no EOF either (the supervisor holds both ends of the pipe), so the wait
runs to its end: with 60 s, a killed worker stayed unreplaced for up to a minute, and while
the supervisor waited on one worker it looked at no other. Here the wait ends when the
worker answers *or its process ends* (its sentinel), and every worker's death is checked
before any ping, so a killed worker is replaced within the supervisor's 0.5 s tick.

A worker that has never answered is still starting (unpickling its config imports
frontdesk, several seconds on a busy machine): it gets `startup_seconds`; one that has
answered gets `WORKER_HEALTHCHECK_SECONDS` (a few seconds, uvicorn's default) to answer.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import wait

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process, logger

STARTUP_SECONDS = 60.0


def _answers(process: Process, timeout: float) -> bool:
    """Ping `process`; True when it answers within `timeout`, False at once if it dies."""
    try:
        process.parent_conn.send(b"ping")
        ready = wait([process.parent_conn, process.process.sentinel], timeout)
        if process.parent_conn in ready:
            process.parent_conn.recv()
            return True
        return False
    except (OSError, EOFError, pickle.UnpicklingError):
        return False


class Supervisor(Multiprocess):
    """`Multiprocess` whose health check ends when a worker dies (see the module)."""

    def __init__(self, config: Config, sockets: list[object], startup_seconds: float) -> None:
        super().__init__(config, sockets)  # type: ignore[arg-type]
        self.startup_seconds = startup_seconds
        self._answered: set[int] = set()

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):  # The dead first, without a ping.
            if not process.process.is_alive():
                self._replace(idx, process)
        for idx, process in enumerate(self.processes):
            pid = process.pid or 0
            started = pid in self._answered
            timeout = self.config.timeout_worker_healthcheck if started else self.startup_seconds
            if _answers(process, timeout):
                self._answered.add(pid)
                continue
            self._replace(idx, process)

    def _replace(self, idx: int, process: Process) -> None:
        process.kill()  # Hung, or dead already.
        process.join()
        self._answered.discard(process.pid or 0)
        if process.exitcode == STARTUP_FAILURE:
            logger.error(f"Child process [{process.pid}] failed to start, stopping the parent.")
            self.should_exit.set()
            return
        if self.should_exit.is_set():
            return
        logger.info(f"Child process [{process.pid}] died")
        fresh = Process(self.config, self.sockets)
        fresh.start()
        self.processes[idx] = fresh
