"""The redaction benchmark runs, and the redacted views keep no clear copy of the numbers."""

from __future__ import annotations

from benchmarks.redaction import measure


def test_the_redacted_views_show_none_of_the_stored_copies() -> None:
    figures = measure(turns=3, repeat=1)
    assert figures["stored_copies"] > figures["turns"] * 4  # copied into most attempt rows
    assert figures["rows_with_copies"] > figures["turns"]
    assert figures["shown_copies"] == 0
    assert figures["view_redacted_ms"] > 0 and figures["log_line_us"] > 0
