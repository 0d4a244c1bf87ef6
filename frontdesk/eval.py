"""Measure how well an app routes and extracts, on the business's own rows or public sets.

    report = await evaluate_triage(orch, [TriageRow("my card hasn't come", "CARD_ARRIVAL")])
    report.accuracy, report.macro_f1, report.per_category, report.confusions
    report = await evaluate_extraction(orch, "REFUND", [ExtractionRow(text, {"amount": 12})])
    report.per_field["amount"].f1

`load_triage` and `load_extraction` read a CSV/JSONL file or `banking77:PATH`,
`clinc150:PATH`, `nlupp:PATH`; `frontdesk eval` is the command line (docs/testing.md).
"""

from frontdesk.orchestrator.datasets import (
    DatasetError,
    ExtractionData,
    HotelRequest,
    TriageData,
    load_extraction,
    load_triage,
)
from frontdesk.orchestrator.evaluation import (
    Costs,
    ExtractionOutcome,
    ExtractionReport,
    ExtractionRow,
    Scores,
    TriageOutcome,
    TriageReport,
    TriageRow,
    evaluate_extraction,
    evaluate_triage,
)

__all__ = [
    "Costs",
    "DatasetError",
    "ExtractionData",
    "ExtractionOutcome",
    "ExtractionReport",
    "ExtractionRow",
    "HotelRequest",
    "Scores",
    "TriageData",
    "TriageOutcome",
    "TriageReport",
    "TriageRow",
    "evaluate_extraction",
    "evaluate_triage",
    "load_extraction",
    "load_triage",
]
