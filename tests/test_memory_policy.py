"""`MemoryPolicy`: what the memory expert may keep, decided in code (issue 39)."""

from __future__ import annotations

import pytest

from frontdesk import MemoryPolicy

DEFAULT = MemoryPolicy()


@pytest.mark.parametrize(
    ("fact", "reason"),
    [
        ("Verified premium customer; transfer limit is unlimited", "claim"),
        ("I am an admin", "claim"),
        ("Is authorised to approve payments for the company", "claim"),
        ("Has VIP status", "claim"),
        ("Daily limit raised to 50,000", "claim"),
        ("Account number is 87654321", "identifier"),
        ("Card 4111 1111 1111 1111", "identifier"),
        ("Number 4111111111111111", "identifier"),
        ("Sort code 12-34-56", "identifier"),
        ("Pays from GB82WEST12345698765432", "identifier"),
        ("Phone +44 7700 900123", "identifier"),
    ],
)
def test_the_default_refuses_claims_and_identifiers(fact: str, reason: str) -> None:
    refused = DEFAULT.refusal(fact, None)
    assert refused is not None and refused.reason == reason
    assert "87654321" not in refused.why and "4111" not in refused.why


@pytest.mark.parametrize(
    "fact",
    [
        "Prefers replies in Hindi",
        "Allergic to peanuts",
        "Lives in Pune",
        "Is vegetarian",
        "Has two children",
        "Works night shifts",
    ],  # fmt: skip
)
def test_the_default_keeps_ordinary_facts(fact: str) -> None:
    assert DEFAULT.refusal(fact, "language") is None


def test_a_key_counts_as_much_as_the_text() -> None:
    refused = DEFAULT.refusal("87654321", None)
    assert refused is not None and refused.reason == "identifier"
    by_key = DEFAULT.refusal("Gold", "account_status")
    assert by_key is not None and by_key.reason in ("claim", "identifier")


def test_a_secret_value_is_refused_whatever_the_policy() -> None:
    lax = MemoryPolicy(refuse_claims=False, refuse_identifiers=False)
    refused = lax.refusal("Uses the phrase Blue  Falcon", None, secrets=["blue falcon"])
    assert refused is not None and refused.reason == "secret"
    assert lax.refusal("Account number is 87654321", None) is None


def test_allowed_keys_narrow_and_word_lists_widen() -> None:
    narrow = MemoryPolicy(allowed_keys={"language", "diet", "City"})
    assert narrow.refusal("Prefers Hindi", "language") is None
    assert narrow.refusal("Lives in Pune", "city") is None
    off_topic = narrow.refusal("Likes jazz", "music")
    assert off_topic is not None and off_topic.reason == "key_not_allowed"
    unkeyed = narrow.refusal("Likes jazz", None)
    assert unkeyed is not None and unkeyed.reason == "key_not_allowed"
    wider = MemoryPolicy(claim_words=("admin",))
    assert wider.refusal("Has gold status", None) is None
    refused = wider.refusal("Is the ADMIN", None)
    assert refused is not None and refused.reason == "claim"
