"""The profile reader counts each sample once per function, only under the turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.profile_shares import main, shares, stacks

_TURN = "<module> (run.py:4);main (run.py:9);run_turn (orchestrator/turn.py:139)"
RAW = "\n".join(
    [
        f"{_TURN};_finish (orchestrator/turn.py:1200);deflate (audit/compact.py:82) 30",
        f"{_TURN};_value (audit/blobs.py:253);_value (audit/blobs.py:260);"
        "deflate (audit/compact.py:81) 10",
        f"{_TURN};_experts (orchestrator/turn.py:578) 60",
        " 7",  # A thread's samples without a frame.
        "<module> (run.py:4);main (run.py:9);_open (orchestrator/_orchestrator.py:300);"
        "deflate (audit/compact.py:82) 500",
    ]
)


def test_shares_count_the_samples_under_the_root_once_per_function() -> None:
    names = ["deflate", "_value", "_finish", "deflate (audit/compact.py)", "_open"]
    found = shares(stacks(RAW.splitlines()), ["run_turn"], names)
    assert found.total == 100  # The 500 samples of the start-up are not the turn's.
    assert found.share("deflate") == 0.4  # Its two lines are one function.
    assert found.share("_value") == 0.1  # Recursion counts a sample once.
    assert found.share("_finish") == 0.3
    assert found.share("deflate (audit/compact.py)") == 0.4  # A name with its file.
    assert found.share("_open") == 0.0
    assert found.innermost.most_common(1) == [("_experts (orchestrator/turn.py)", 60)]


def test_a_line_not_in_py_spy_s_format_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        list(stacks(["main (run.py:1) 3", "main (run.py:1) many"]))


def test_the_command_prints_the_shares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "turn.txt"
    profile.write_text(RAW)
    main([str(profile), "deflate", "--top", "1"])
    out = capsys.readouterr().out
    assert "100 samples under run_turn or SpeculativeRequest._extract" in out
    assert "40.0 %  deflate" in out
    assert "60.0 %  _experts (orchestrator/turn.py)" in out
    with pytest.raises(SystemExit):
        main([str(profile), "--root", "nowhere"])
