"""`frontdesk knowledge add|list|search|remove`: the documents the replies are grounded in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app

runner = CliRunner()

FEES = """# Fees

## Overdraft fees
An arranged overdraft costs 39.9% EAR.

## International transfers
Sending money abroad costs a flat 3 pounds.
"""


def _run(*args: str) -> str:
    result = runner.invoke(app, ["knowledge", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_add_list_search_and_remove(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    fees = tmp_path / "fees.md"
    fees.write_text(FEES, encoding="utf-8")
    hours = tmp_path / "hours.txt"
    hours.write_text("Branches open at nine.\n\nThe phone line never closes.", encoding="utf-8")
    added = _run("add", str(fees), str(hours), "--db", url)
    # Named by their path in their common folder: no machine path for customers to see.
    assert "fees.md: 2 passages" in added and "hours.txt: 2 passages" in added
    assert str(tmp_path) not in added
    _run("add", str(fees), "--source", "help/fees.md", "--db", url)
    listed = json.loads(_run("list", "--json", "--db", url))
    assert {"source": "help/fees.md", "passages": 2} in listed and len(listed) == 3
    assert "help/fees.md" in _run("list", "--db", url)
    found = json.loads(_run("search", "send money abroad", "--limit", "1", "--json", "--db", url))
    assert len(found) == 1 and found[0]["title"] == "International transfers"
    assert found[0]["version"] == 1 and found[0]["score"] > 0 and len(found[0]["sha256"]) == 64
    shown = _run("search", "overdraft", "--db", url)
    assert "Overdraft fees" in shown and "39.9% EAR" in shown
    assert "removed help/fees.md: 2 passages" in _run("remove", "help/fees.md", "--db", url)
    assert len(json.loads(_run("list", "--json", "--db", url))) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "missing.md"], "no file"),
        (["add", "a.md", "b.md", "--source", "x"], "exactly one PATH"),
        (["add", "a.md", "b.md", "--source", "help.md"], "or a pattern for each file"),
        (["add", "a.md", "sub/a.md", "--source", "help/{name}"], "two files would be"),
        (["add", "a.md", "--root", "sub"], "is not under --root"),
        (["remove", "never-added.md"], "no source"),
        (["search", "fees", "--limit", "0"], "limit must be 1 to 100"),
    ],
)
def test_mistakes_are_told_plainly(
    tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.md").write_text("## A\nalpha", encoding="utf-8")
    (tmp_path / "b.md").write_text("## B\nbeta", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("## A again\nalpha", encoding="utf-8")
    result = runner.invoke(app, ["knowledge", *args, "--db", f"sqlite:///{tmp_path / 'fd.db'}"])
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_a_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "logo.md"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    result = runner.invoke(
        app, ["knowledge", "add", str(binary), "--db", f"sqlite:///{tmp_path / 'fd.db'}"]
    )
    assert result.exit_code != 0 and "not UTF-8" in result.output


def test_sources_are_named_relative_to_root_or_by_a_pattern(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    docs = tmp_path / "site" / "docs"
    (docs / "fees").mkdir(parents=True)
    (docs / "fees" / "cards.md").write_text("## Cards\nNo fee abroad.", encoding="utf-8")
    (docs / "hours.md").write_text("## Hours\nNine to five.", encoding="utf-8")
    files = [str(docs / "fees" / "cards.md"), str(docs / "hours.md")]
    added = _run("add", *files, "--db", url)
    assert "fees/cards.md: 1 passage" in added and "hours.md: 1 passage" in added
    added = _run("add", *files, "--root", str(tmp_path / "site"), "--db", url)
    assert "docs/fees/cards.md: 1 passage" in added
    added = _run("add", *files, "--source", "help/{stem}", "--db", url)
    assert "help/cards: 1 passage" in added and "help/hours: 1 passage" in added
    listed = {s["source"] for s in json.loads(_run("list", "--json", "--db", url))}
    assert not any(str(tmp_path) in source for source in listed), listed


def test_each_profile_has_its_own_library(tmp_path: Path) -> None:
    """`--profile NAME`: the documents of one business of the app (the card desk beside
    the potato shop); without it, the app's default profile's."""
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    fees = tmp_path / "fees.md"
    fees.write_text(FEES, encoding="utf-8")
    desks = ["--db", url, "--app", "frontdesk.examples.card_desk:desks"]
    assert "fees.md: 2 passages" in _run("add", str(fees), "--profile", "cards", *desks)
    assert json.loads(_run("list", "--json", *desks)) == []
    listed = json.loads(_run("list", "--json", "--profile", "cards", *desks))
    assert listed == [{"source": "fees.md", "passages": 2}]
    assert json.loads(_run("search", "overdraft", "--json", "--profile", "potatoes", *desks)) == []
    found = json.loads(_run("search", "overdraft", "--json", "--profile", "cards", *desks))
    assert found[0]["title"] == "Overdraft fees"
    unknown = runner.invoke(app, ["knowledge", "list", "--profile", "loans", *desks])
    assert unknown.exit_code != 0 and "no profile 'loans'" in unknown.output
    assert "removed fees.md" in _run("remove", "fees.md", "--profile", "cards", *desks)
