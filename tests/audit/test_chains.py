import hashlib
import os

from frontdesk.audit.chains import is_user_chain, legacy_user_chain_id, user_chain_id
from frontdesk.audit.refs import UserRefs


def test_a_user_chain_id_is_stable_and_carries_no_user_id() -> None:
    chain = user_chain_id("alice@example.com")
    assert chain == user_chain_id("alice@example.com")
    assert chain != user_chain_id("bob@example.com")
    assert "alice" not in chain
    assert len(chain) == len("user:") + 32
    assert is_user_chain(chain)
    assert not is_user_chain("conv-1")


def test_with_the_logs_refs_a_user_chain_id_is_keyed_and_the_old_form_stays_nameable() -> None:
    plain = hashlib.sha256(b"cust-00424242").hexdigest()[:32]
    assert user_chain_id("cust-00424242") == legacy_user_chain_id("cust-00424242")
    assert legacy_user_chain_id("cust-00424242") == "user:" + plain  # What 0017 wrote.
    refs = UserRefs(os.urandom(32))
    keyed = user_chain_id("cust-00424242", refs)
    assert keyed == user_chain_id("cust-00424242", refs) and is_user_chain(keyed)
    assert len(keyed) == len("user:") + 32 and plain not in keyed
    assert keyed != user_chain_id("cust-00424242", UserRefs(os.urandom(32)))
