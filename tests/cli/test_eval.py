"""`frontdesk eval triage|extract DATA`: the reports a run writes, on small samples of the sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.cli.evaluation import state_path

DATA = Path(__file__).resolve().parents[1] / "data" / "eval"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # The resume state file is written in the working folder.


def test_banking77_offline_writes_the_json_and_html_reports(tmp_path: Path) -> None:
    out, page = tmp_path / "out.json", tmp_path / "out.html"
    result = runner.invoke(
        app,
        ["eval", "triage", f"banking77:{DATA / 'banking77'}", "--model", "offline",
         "--examples", "3", "--limit", "200", "--json", str(out), "--html", str(page)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    keys = ("accuracy", "macro_f1", "per_category", "confusions", "messages", "model_calls")
    assert set(report) >= {*keys, "tokens", "p50_s", "p95_s"}
    assert report["messages"] == 9 and report["model_calls"] == 9
    assert 0 <= report["accuracy"] <= 1 and report["oos_recall"] is None
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html and "<script" not in html
    assert list(tmp_path.glob(".frontdesk-eval-*")) == []  # Done: no state left to resume.


def test_clinc150_reports_out_of_scope_recall(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(
        app,
        ["eval", "triage", f"clinc150:{DATA / 'clinc150'}", "--model", "offline",
         "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["messages"] == 12 and report["oos_recall"] is not None
    assert "out-of-scope recall" in result.stdout


def test_nlupp_extraction_offline(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(
        app, ["eval", "extract", f"nlupp:{DATA / 'nlupp-hotels'}", "--model", "offline",
              "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["category"] == "HOTEL" and report["messages"] == 12
    assert set(report) >= {"micro_f1", "per_field", "need_more_info_rate", "p95_s"}


def test_a_missing_data_set_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "triage", f"banking77:{tmp_path / 'nowhere'}"])
    assert result.exit_code != 0
    assert "train.csv: cannot read it" in result.output


def test_a_stopped_run_resumes_from_the_rows_it_kept(tmp_path: Path) -> None:
    data = f"banking77:{DATA / 'banking77'}"
    kept = {
        "index": 0, "expected": "CARD_ARRIVAL", "predicted": "EXCHANGE_RATE", "error": None,
        "usage": {"seconds": 0.5, "model_calls": 1, "input_tokens": 10, "output_tokens": 2,
                  "cost_usd": 0.0, "cost_known": True},
    }  # fmt: skip
    state = state_path(["triage", data, None, "offline", 3, None])
    state.write_text(json.dumps(kept) + "\n{cut off by Ctrl-\n", encoding="utf-8")
    out = tmp_path / "out.json"
    result = runner.invoke(
        app, ["eval", "triage", data, "--model", "offline", "--examples", "3", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "resuming: 1 of 9 rows already scored" in result.output
    report = json.loads(out.read_text())
    assert report["messages"] == 9
    assert {"expected": "CARD_ARRIVAL", "predicted": "EXCHANGE_RATE", "count": 1} in report[
        "confusions"
    ]
    assert not state.exists()
