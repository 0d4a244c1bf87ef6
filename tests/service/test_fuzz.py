"""schemathesis against `/openapi.json`: generated requests, with a valid token, never get a
500 and every answer matches the documented schema. Bounded: a few examples per operation.
The token is an operator's, so that the operator routes are reached too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from frontdesk.service import TokenVerifier, create_app
from frontdesk.service._events import StreamTiming
from tests.service import _shop
from tests.service._server import serve_thread
from tests.service.conftest import SECRET, auth

# The document of the app as served (building an app opens nothing).
schema = schemathesis.openapi.from_dict(
    create_app(
        _shop.build("sqlite:///unopened.db"), verifier=TokenVerifier(secret=SECRET)
    ).openapi()
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    app = create_app(
        _shop.build(f"sqlite:///{db}"),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        event_timing=StreamTiming(poll=0.1, max_age=1.0),  # the live streams end soon
    )
    with serve_thread(app) as url:
        yield url


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_operation_answers_500(case: schemathesis.Case[Any], base_url: str) -> None:
    # The library refuses more text than a JSON schema can say (control characters, a
    # question over an expert's token allowance), always with its own 422 and message: so
    # schema-valid data may be refused. Every other check stays on.
    case.call_and_validate(
        base_url=base_url,
        headers=auth("fuzzer", roles=("operator",)),  # every route open to it
        excluded_checks=[positive_data_acceptance],
    )
