"""An evaluation report as one self-contained HTML page: tables, a confusion heat map and
per-category bars drawn as inline SVG (no script, no external file), to attach to a review."""

from __future__ import annotations

from collections import Counter
from html import escape

from frontdesk.orchestrator.evaluation import ExtractionReport, Scores, TriageReport

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2rem;color:#222;max-width:1100px}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse}td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #ddd}
td:first-child,th:first-child{text-align:left}svg text{font:10px system-ui,sans-serif}
"""


def triage_html(report: TriageReport, *, title: str) -> str:
    """The page for a triage evaluation."""
    c = report.costs
    summary = [
        ("messages", str(c.messages)),
        ("accuracy", f"{report.accuracy:.3f}"),
        ("macro-F1", f"{report.macro_f1:.3f}"),
        ("out-of-scope recall", "-" if report.oos_recall is None else f"{report.oos_recall:.3f}"),
        (
            "in-scope accuracy",
            "-" if report.in_scope_accuracy is None else f"{report.in_scope_accuracy:.3f}",
        ),
        ("failed calls", str(report.errors)),
        *_cost_rows(c.model_calls_per_message, c.tokens["per_message"], c.p50_s, c.p95_s),
        ("cost per 1,000 messages", _usd(c.cost_per_1000_usd, c.cost_known)),
    ]
    confusions = "".join(
        f"<tr><td>{escape(x['expected'])}</td><td>{escape(x['predicted'])}</td>"
        f"<td>{x['count']}</td></tr>"
        for x in report.confusions
    )
    return _page(
        title,
        _table(["", ""], summary)
        + "<h2>Confusion heat map (rows: expected, columns: predicted)</h2>"
        + _heat_map(report)
        + "<h2>Per category: precision and recall</h2>"
        + _bars(report.per_category)
        + "<h2>Most frequent confusions</h2><table><tr><th>expected</th><th>predicted</th>"
        + f"<th>count</th></tr>{confusions}</table>",
    )


def extraction_html(report: ExtractionReport, *, title: str) -> str:
    """The page for an extraction evaluation."""
    c = report.costs
    summary = [
        ("category", report.category),
        ("messages", str(c.messages)),
        ("micro-F1", f"{report.micro_f1:.3f}"),
        ("exact match", f"{report.exact_match:.3f}"),
        ("need-more-info rate", f"{report.need_more_info_rate:.3f}"),
        ("failed calls", str(report.errors)),
        *_cost_rows(c.model_calls_per_message, c.tokens["per_message"], c.p50_s, c.p95_s),
        ("cost per 1,000 messages", _usd(c.cost_per_1000_usd, c.cost_known)),
    ]
    return _page(
        title,
        _table(["", ""], summary) + "<h2>Per field: precision and recall</h2>"
        "" + _bars(report.per_field),
    )


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}'
        f"</title><style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}"
        "</body></html>\n"
    )


def _cost_rows(calls: float, tokens: float, p50: float, p95: float) -> list[tuple[str, str]]:
    return [
        ("model calls per message", f"{calls:.2f}"),
        ("tokens per message", f"{tokens:.0f}"),
        ("time p50 / p95", f"{p50:.3f}s / {p95:.3f}s"),
    ]


def _usd(value: float, known: bool) -> str:
    return f"${value:.4f}" + ("" if known else " (some model prices unknown)")


def _table(head: list[str], rows: list[tuple[str, str]]) -> str:
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table><tr>{header}</tr>{body}</table>"


def _heat_map(report: TriageReport) -> str:
    """Counts of (expected, predicted), darker for more, one cell per pair of labels."""
    labels = sorted(report.per_category)
    if not labels:
        return "<p>No rows.</p>"
    index = {label: i for i, label in enumerate(labels)}
    counts = Counter((o.expected, o.predicted) for o in report.outcomes if o.predicted in index)
    support = Counter(o.expected for o in report.outcomes)
    cell = max(4, min(16, 900 // len(labels)))
    margin = 160
    size = margin + cell * len(labels)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}"'
        f' role="img" aria-label="confusion heat map">'
    ]
    for label, i in index.items():
        y = margin + i * cell + cell - 2
        parts.append(
            f'<text x="{margin - 4}" y="{y}" text-anchor="end">{escape(label[:28])}</text>'
        )
        parts.append(
            f'<text transform="translate({margin + i * cell + cell - 2},{margin - 4}) rotate(-90)"'
            f">{escape(label[:28])}</text>"
        )
    for (expected, predicted), n in counts.items():
        share = n / max(support[expected], 1)
        colour = "#2b6" if expected == predicted else "#d33"
        x, y = margin + index[predicted] * cell, margin + index[expected] * cell
        parts.append(
            f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{colour}"'
            f' fill-opacity="{0.15 + 0.85 * share:.2f}">'
            f"<title>{escape(expected)} -&gt; {escape(predicted)}: {n}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bars(scores: dict[str, Scores]) -> str:
    """Two bars per label: precision (blue) and recall (orange), 0 to 1."""
    if not scores:
        return "<p>Nothing to score.</p>"
    row, label_w, bar_w = 18, 220, 400
    height = row * len(scores) + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 120}"'
        f' height="{height}" role="img" aria-label="precision and recall per label">'
    ]
    for i, (label, s) in enumerate(sorted(scores.items())):
        y = 10 + i * row
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{escape(label)}</text>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{bar_w * s.precision:.1f}" height="7"'
            f' fill="#36c"><title>precision {s.precision:.3f}</title></rect>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 8}" width="{bar_w * s.recall:.1f}" height="7"'
            f' fill="#e83"><title>recall {s.recall:.3f}</title></rect>'
        )
        parts.append(
            f'<text x="{label_w + bar_w + 6}" y="{y + 11}">P {s.precision:.2f} R {s.recall:.2f}'
            f" (n={s.support})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
