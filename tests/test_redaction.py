"""`frontdesk.redaction`: the detectors, the policy, per-field rules and pseudonyms."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from frontdesk.errors import ConfigError
from frontdesk.redaction import (
    DETECTOR_NAMES,
    SECRET_ENV,
    Redact,
    RedactionPolicy,
    Redactor,
    field_rules,
    iban_valid,
    luhn_valid,
    mask,
)

R = Redactor()


def kinds(text: str, redactor: Redactor = R) -> list[str]:
    return [name for name, _ in redactor.findings(text)]


# -- checksum-valid fixtures ----------------------------------------------------------------


def luhn_complete(prefix: str) -> str:
    """`prefix` plus the digit that makes it pass the Luhn check."""
    return next(prefix + d for d in string.digits if luhn_valid(prefix + d))


def iban_for(country: str, bban: str) -> str:
    """A checksum-valid IBAN for `country` and `bban`."""
    numeric = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{bban}"


def grouped(s: str, sep: str = " ", size: int = 4) -> str:
    return sep.join(s[i : i + size] for i in range(0, len(s), size))


PANS = [
    "4111111111111111",  # Visa test
    "5555555555554444",  # Mastercard test
    "378282246310005",  # Amex (15)
    "6011111111111117",  # Discover
    "4000056655665556",
    "3530111333300000",  # JCB
    "4222222222222",  # Visa, 13 digits
    *(luhn_complete("4" + "".join(random.Random(i).choices(string.digits, k=14)))
      for i in range(20)),
    *(luhn_complete("5" + "".join(random.Random(i).choices(string.digits, k=17)))
      for i in range(5)),  # 19 digits
]  # fmt: skip

IBANS = [
    "GB82WEST12345698765432",
    "DE89370400440532013000",
    "FR1420041010050500013M02606",
    "NL91ABNA0417164300",
    "ES9121000418450200051332",
    "IE29AIBK93115212345678",
    "BE68539007547034",
    "CH9300762011623852957",
    *(iban_for("GB", "NWBK" + "".join(random.Random(i).choices(string.digits, k=14)))
      for i in range(10)),
]  # fmt: skip


def test_the_fixtures_are_checksum_valid() -> None:
    assert all(luhn_valid(p) for p in PANS) and all(iban_valid(i) for i in IBANS)
    assert not luhn_valid("4111111111111112") and not iban_valid("GB82WEST12345698765433")


# -- card numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("pan", PANS)
@pytest.mark.parametrize("style", ["plain", "spaces", "dashes"])
def test_every_luhn_valid_card_number_is_found(pan: str, style: str) -> None:
    shown = {"plain": pan, "spaces": grouped(pan), "dashes": grouped(pan, "-")}[style]
    text = f"my card is {shown}, expiry 12/27"
    assert kinds(text) == ["card"]
    assert R.text(text) == "my card is [CARD], expiry 12/27"


def test_a_card_number_next_to_other_digits_is_still_found() -> None:
    assert R.text("card 4111 1111 1111 1111 12 27 cvv 123") == "card [CARD] 12 27 cvv 123"
    assert R.text("4111111111111111.") == "[CARD]."


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # Luhn-invalid
        "4111111111111112",
        "order 1234567890123",  # 13 digits, Luhn-invalid
        "41111111111111111111",  # 20 digits: too long for a card
        "tracking 123456789012",  # 12 digits: too short
        "on 2024-01-15 at 10:30",
    ],
)
def test_luhn_invalid_or_wrong_length_numbers_are_untouched(text: str) -> None:
    assert "card" not in kinds(text)
    assert R.text(text) == text


@settings(max_examples=200, deadline=None)
@given(
    digits=st.text(alphabet=string.digits, min_size=11, max_size=17).map(lambda d: "4" + d),
    sep=st.sampled_from(["", " ", "-"]),
)
def test_property_a_card_is_redacted_exactly_when_luhn_valid(digits: str, sep: str) -> None:
    pan = luhn_complete(digits)
    text = f"pay with {grouped(pan, sep)} please"
    assert R.text(text) == "pay with [CARD] please"
    wrong = pan[:-1] + str((int(pan[-1]) + 1) % 10)
    assert not luhn_valid(wrong)
    text = f"pay with {grouped(wrong, sep)} please"
    whole = (text.index(wrong[:4]), text.index(" please"))
    # A run of its groups may pass by chance (a card followed by other digits is found),
    # but never the whole number.
    assert ("card", whole) not in R.findings(text)
    if not sep:
        assert R.text(text) == text


# -- IBAN -----------------------------------------------------------------------------------


@pytest.mark.parametrize("iban", IBANS)
def test_every_mod97_valid_iban_is_found(iban: str) -> None:
    for shown in (iban, grouped(iban), grouped(iban).lower()):
        text = f"IBAN: {shown} thanks"
        assert R.text(text) == "IBAN: [IBAN] thanks", shown


def test_an_iban_before_capitals_or_punctuation() -> None:
    assert R.text("to GB82 WEST 1234 5698 7654 32 OK?") == "to [IBAN] OK?"
    assert R.text("(GB82WEST12345698765432)") == "([IBAN])"


@pytest.mark.parametrize(
    "text",
    ["GB82 WEST 1234 5698 7654 33", "GB82WEST1234569876543", "ab12 cdef ghij klmn op"],
)
def test_ibans_failing_mod97_or_length_are_untouched(text: str) -> None:
    assert "iban" not in kinds(text)


@settings(max_examples=100, deadline=None)
@given(bban=st.text(alphabet=string.ascii_uppercase + string.digits, min_size=18, max_size=18))
def test_property_generated_gb_ibans_are_redacted(bban: str) -> None:
    iban = iban_for("GB", bban)
    assert R.text(f"send to {grouped(iban)} now") == "send to [IBAN] now"


# -- email, phone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "email", ["jane@example.com", "jane.doe+shop@mail.example.co.uk", "J_D-1@sub.domain.io"]
)
def test_emails_are_found(email: str) -> None:
    assert R.text(f"write to {email}.") == "write to [EMAIL]."


def test_things_that_are_not_emails() -> None:
    for text in ("a @ b", "user@localhost", "@handle", "price@5"):
        assert "email" not in kinds(text), text


@pytest.mark.parametrize(
    "phone",
    [
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "+447911123456",
        "0044 7911 123456",
        "+1 (555) 123-4567",
        "+33 1 23 45 67 89",
        "020 7946 0958",
        "(020) 7946 0958",
        "07911 123456",
        "07911-123-456",
        "0161 496 0000",
    ],
)
def test_international_and_uk_phone_numbers_are_found(phone: str) -> None:
    assert R.text(f"call me on {phone} today") == "call me on [PHONE] today"


@pytest.mark.parametrize(
    "text",
    [
        "order 07911123456 arrived",  # an order number shaped like a mobile
        "order number: 02079460958",
        "ref 01614960000",
        "invoice #07911 123456",
        "delivered on 2024-01-15",
        "01/02/2024",
        "12.03.2024",
        "I want 2 bags, 10 kg",
        "bags 12345678",
        "0800 123",  # too short
        "00000000000",  # 00 is a prefix, not a number
    ],
)
def test_order_numbers_dates_and_quantities_are_not_phones(text: str) -> None:
    assert kinds(text) == [], text


# -- sort codes and account numbers ---------------------------------------------------------


def test_sort_codes_and_account_numbers() -> None:
    assert (
        R.text("sort code 12-34-56 account 12345678") == "sort code [SORT_CODE] account [ACCOUNT]"
    )
    assert R.text("12-34-56 87654321") == "[SORT_CODE] [ACCOUNT]"  # beside a sort code
    assert R.text("my account number is 1234 5678") == "my account number is [ACCOUNT]"
    assert R.text("sort code: 20 00 00") == "sort code: [SORT_CODE]"
    assert R.text("bank sortcode 200000") == "bank sortcode [SORT_CODE]"


@pytest.mark.parametrize(
    "text",
    [
        "on 12-03-24 I paid",  # a date, no bank words
        "12345678 potatoes",  # 8 digits, no account words or sort code
        "see you at 12 34 56",
        "a 123-45-678 code",
    ],
)
def test_dates_and_bare_numbers_are_not_bank_details(text: str) -> None:
    assert kinds(text) == [], text


def test_an_iban_wins_over_the_account_number_inside_it() -> None:
    assert kinds("account GB82 WEST 1234 5698 7654 32") == ["iban"]


# -- styles, extra detectors, policy ---------------------------------------------------------


def test_replacement_styles() -> None:
    text = "card 4111 1111 1111 1111, mail jane@example.com"
    masked = Redactor(RedactionPolicy(style="mask"))
    assert masked.text(text) == "card **** **** **** 1111, mail ****@******e.com"
    per = Redactor(RedactionPolicy(styles={"card": "mask"}))
    assert per.text(text) == "card **** **** **** 1111, mail [EMAIL]"
    pseudo = Redactor(RedactionPolicy(style="pseudonymise", secret=b"s"))
    out = pseudo.text(text, user_id="u-1")
    token = pseudo.pseudonym("4111 1111 1111 1111", user_id="u-1")
    assert out.startswith(f"card {token}, mail [pseudonym:") and "4111" not in out


def test_only_the_detectors_switched_on_run() -> None:
    r = Redactor(RedactionPolicy(detectors={"card"}))
    assert r.text("4111111111111111 jane@example.com") == "[CARD] jane@example.com"
    assert set(DETECTOR_NAMES) == {"card", "iban", "email", "phone", "sort_code", "account"}


def test_extra_regex_detectors() -> None:
    r = Redactor(RedactionPolicy(extra={"order_ref": r"\bORD-\d{6}\b"}))
    assert r.text("ORD-123456 and 4111111111111111") == "[ORDER_REF] and [CARD]"


def test_secrets_are_masked_too_unless_switched_off() -> None:
    key = "sk-ant-api03-abcdefghijklmnop"
    assert R.text(f"key {key}") == "key sk-ant-***"
    assert Redactor(RedactionPolicy(secrets=False)).text(f"key {key}") == f"key {key}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"detectors": {"cards"}}, "unknown detector(s) ['cards']"),
        ({"style": "blur"}, "unknown replacement style 'blur'"),
        ({"styles": {"card": "x"}}, "styles['card']"),
        ({"fields": {"pan": "hide"}}, "unknown redaction rule 'hide'"),
        ({"extra": {"x": "("}}, "extra detector 'x'"),
        ({"extra": {"card": "x"}}, "built-in name"),
    ],
)
def test_a_bad_policy_is_a_config_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        RedactionPolicy(**kwargs)


def test_a_policy_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"detectors": ["card"], "styles": {"card": "mask"}}))
    policy = RedactionPolicy.from_file(path)
    assert Redactor(policy).text("4111111111111111") == "************1111"
    path.write_text(json.dumps({"detector": ["card"]}))
    with pytest.raises(ConfigError, match="unknown key"):
        RedactionPolicy.from_file(path)
    path.write_text("[1]")
    with pytest.raises(ConfigError, match="JSON object"):
        RedactionPolicy.from_file(path)
    with pytest.raises(ConfigError, match="cannot read"):
        RedactionPolicy.from_file(tmp_path / "missing.json")


def test_json_payloads_are_redacted_throughout() -> None:
    payload = {
        "messages": [{"role": "user", "content": "card 4111 1111 1111 1111"}],
        "nested": {"account number": 12345678, "note": "account 12345678", "n": 3},
        "ok": True,
    }
    assert R.value(payload) == {
        "messages": [{"role": "user", "content": "card [CARD]"}],
        "nested": {"account number": 12345678, "note": "account [ACCOUNT]", "n": 3},
        "ok": True,
    }
    assert R.value(4111111111111111) == "[CARD]"  # a card number recorded as a number


# -- per-field rules ------------------------------------------------------------------------


class Address(BaseModel):
    postcode: Annotated[str, Redact("mask")]
    city: str


class Payment(BaseModel):
    card_number: Annotated[str, Redact("mask")]
    holder: Annotated[str, Redact("pseudonymise")]
    memo: str = Field(default="", json_schema_extra={"redact": "drop"})
    order_ref: Annotated[str, Redact("keep")] = ""
    amount: int = 0
    address: Address | None = None
    items: list[Address] = []


def test_field_rules_from_annotations_and_json_schema_extra() -> None:
    assert dict(field_rules(Payment)) == {
        "card_number": "mask",
        "holder": "pseudonymise",
        "memo": "drop",
        "order_ref": "keep",
        "address.postcode": "mask",
        "items.postcode": "mask",
    }
    assert "redact" not in json.dumps(Payment.model_json_schema()["properties"]["card_number"])


def test_a_bad_rule_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown redaction rule 'hide'"):
        Redact("hide")  # type: ignore[arg-type]

    class Bad(BaseModel):
        x: str = Field(json_schema_extra={"redact": "hide"})

    with pytest.raises(ConfigError, match="Bad.x"):
        field_rules(Bad)


PAYMENT = {
    "card_number": "4111 1111 1111 1111",
    "holder": "Priya Shah",
    "memo": "gift for mum",
    "order_ref": "07911123456",  # looks like a phone, kept as the model says
    "amount": 25,
    "address": {"postcode": "SW1A 1AA", "city": "London"},
    "items": [{"postcode": "EC1A 1BB", "city": "call 07911 123456"}],
}


def test_keep_mask_pseudonymise_drop() -> None:
    r = Redactor(RedactionPolicy(secret=b"installation"))
    shown = r.request(PAYMENT, field_rules(Payment), user_id="u-1")
    assert shown == {
        "card_number": "**** **** **** 1111",
        "holder": r.pseudonym("Priya Shah", user_id="u-1"),
        "order_ref": "07911123456",
        "amount": 25,
        "address": {"postcode": "***A 1AA", "city": "London"},
        "items": [{"postcode": "***A 1BB", "city": "call [PHONE]"}],
    }
    assert "memo" not in shown


def test_pseudonyms_are_stable_per_user_and_differ_across_users() -> None:
    r = Redactor(RedactionPolicy(secret=b"installation"))
    a1 = r.pseudonym("Priya Shah", user_id="u-1")
    assert a1 == Redactor(RedactionPolicy(secret=b"installation")).pseudonym(
        "Priya Shah", user_id="u-1"
    )  # another process, same secret
    assert a1 != r.pseudonym("Priya Shah", user_id="u-2")
    assert a1 != r.pseudonym("Priya Shahh", user_id="u-1")
    assert a1 != Redactor(RedactionPolicy(secret=b"other")).pseudonym("Priya Shah", user_id="u-1")
    assert a1.startswith("[pseudonym:") and "Priya" not in a1


def test_the_pseudonym_secret_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTDESK_MASTER_KEY", raising=False)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert not Redactor().stable_pseudonyms  # a random per-process secret
    monkeypatch.setenv(SECRET_ENV, "from-env")
    r = Redactor()
    assert r.stable_pseudonyms
    assert r.pseudonym("x", user_id="u") == Redactor(RedactionPolicy(secret="from-env")).pseudonym(
        "x", user_id="u"
    )
    monkeypatch.delenv(SECRET_ENV)
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", "bWFzdGVy")
    assert Redactor().stable_pseudonyms
    assert Redactor().pseudonym("x", user_id="u") != r.pseudonym("x", user_id="u")


def test_policy_fields_win_over_the_model_rules() -> None:
    r = Redactor(
        RedactionPolicy(fields={"holder": "keep", "address.city": "drop", "amount": "mask"})
    )
    shown = r.request(PAYMENT, field_rules(Payment), user_id="u-1")
    assert shown["holder"] == "Priya Shah" and shown["address"] == {"postcode": "***A 1AA"}
    assert shown["amount"] == "25"  # two characters: nothing to hide but the type


def test_ruled_values_are_replaced_in_free_text_too() -> None:
    r = Redactor(RedactionPolicy(secret=b"s"))
    known = r.field_values(PAYMENT, field_rules(Payment), user_id="u-1")
    text = "I'm Priya Shah, it's a gift for mum, ref 07911123456, postcode SW1A 1AA"
    shown = r.text(text, user_id="u-1", known=known)
    token = r.pseudonym("Priya Shah", user_id="u-1")
    assert shown == f"I'm {token}, it's a [MEMO], ref 07911123456, postcode ***A 1AA"
    assert "07911123456" not in known  # kept fields are not hidden, but detectors still run


def test_mask_keeps_the_last_four_and_the_separators() -> None:
    assert mask("4111-1111-1111-1111") == "****-****-****-1111"
    assert mask("abc") == "abc" and mask("") == ""


# -- properties of the redactor -------------------------------------------------------------

WORDS = st.text(alphabet=string.ascii_letters + " ,.!?'", max_size=40)


@settings(max_examples=150, deadline=None)
@given(before=WORDS, after=WORDS, pan=st.sampled_from(PANS), iban=st.sampled_from(IBANS))
def test_property_no_fixture_value_survives_and_redacting_twice_changes_nothing(
    before: str, after: str, pan: str, iban: str
) -> None:
    text = f"{before} {grouped(pan)} {after} {grouped(iban)} {before}"
    shown = R.text(text)
    assert pan[-8:] not in shown.replace(" ", "") and iban[4:12] not in shown.replace(" ", "")
    assert R.text(shown) == shown


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=string.ascii_letters + string.punctuation + " \n", max_size=200))
def test_property_text_without_digits_or_at_signs_is_unchanged(text: str) -> None:
    # Without what the secret masking looks for either (`sk-`, `bearer`, URLs, parameters).
    text = text.replace("@", "").replace("=", "").replace("://", "").replace("-", "")
    assume("bearer" not in text.lower())
    assert R.text(text) == text


def test_the_schema_sent_to_models_carries_no_rule() -> None:
    from frontdesk.experts.providers.base import json_schema_of

    class Note(BaseModel):
        redact: str = Field(description="a field that happens to be called redact")
        text: str = Field(default="", json_schema_extra={"redact": "drop"})
        payment: Payment | None = None

    raw = Note.model_json_schema()
    assert raw["properties"]["text"]["redact"] == "drop"
    sent = json_schema_of(Note)
    assert "redact" in sent["properties"]  # the field stays
    assert "redact" not in json.dumps(sent["properties"]["text"])
    assert '"redact": "drop"' not in json.dumps(sent)
    plain = {k: v for k, v in raw["properties"]["text"].items() if k != "redact"}
    assert sent["properties"]["text"] == plain


def test_the_schema_sent_is_made_once_and_each_call_gets_its_own_copy() -> None:
    from frontdesk.experts.providers.base import json_schema_of

    class Order(BaseModel):
        number: str = Field(json_schema_extra={"redact": "keep"})

    first = json_schema_of(Order)
    first["properties"]["number"]["pattern"] = "changed by a caller"
    first["title"] = "changed"
    second = json_schema_of(Order)
    assert second == json_schema_of(Order)
    assert "pattern" not in second["properties"]["number"]
    assert second["title"] == "Order"
    assert "redact" not in json.dumps(second)


def test_a_turn_has_a_ruled_value_step_only_when_a_rule_changes_a_value() -> None:
    from typing import cast

    from frontdesk.db import AsyncEngine
    from frontdesk.orchestrator.ruled_values import Secrets

    class Kept(BaseModel):
        number: Annotated[str, Redact("keep")]

    class Plain(BaseModel):
        text: str

    class Nested(BaseModel):
        plain: Plain
        payment: Payment

    def secrets(policy: RedactionPolicy | None = None) -> Secrets:
        redactor = Redactor(policy) if policy is not None else R
        return Secrets(redactor=redactor, engine=cast(AsyncEngine, None))

    assert not secrets().change_any([])
    assert not secrets().change_any([Kept, Plain])  # `keep` shows every value as it is.
    assert secrets().change_any([Plain, Nested])  # A nested masked field.
    assert secrets(RedactionPolicy(fields={"text": "drop"})).change_any([Plain])
    assert secrets(RedactionPolicy(fields={"text": "drop"})).change_any([])
