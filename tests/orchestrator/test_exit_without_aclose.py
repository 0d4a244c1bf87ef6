"""A process that ends without `Orchestrator.aclose()` exits cleanly.

The SQLite writer thread's finalizer runs at interpreter exit, after the thread itself has
ended; it used to print `RuntimeError: cannot schedule new futures after shutdown`. The
turn's writes were committed before `handle` returned, so they are there afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import sqlalchemy as sa

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    from frontdesk import Orchestrator
    from frontdesk.testing import FunctionModel, ModelRequest


    def answer(request: ModelRequest) -> object:
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "test"}
        return "Happy to help."


    async def main() -> None:
        orch = Orchestrator([], model=FunctionModel(answer), store=sys.argv[1])
        for i in range(2):
            reply = await orch.handle("c-exit", f"hello {i}", client_message_id=f"m-{i}")
            print(reply.text)
        # No `await orch.aclose()`: the process just ends.


    asyncio.run(main())
    """
)


def test_a_process_that_never_closes_the_orchestrator_exits_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "frontdesk.db"
    script = tmp_path / "bot.py"
    script.write_text(SCRIPT, encoding="utf-8")
    # The interpreter's default warning filters, as a bot's process runs (pytest's are off).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, str(script), f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.stderr == ""
    assert done.returncode == 0
    assert done.stdout.count("Happy to help.") == 2
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        roles = conn.execute(
            sa.text("SELECT role FROM message WHERE conversation_id = 'c-exit'")
        ).scalars()
        assert sorted(roles) == ["assistant", "assistant", "user", "user"]
    engine.dispose()
