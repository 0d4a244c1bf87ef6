from frontdesk.audit.chains import is_user_chain, user_chain_id


def test_a_user_chain_id_is_stable_and_carries_no_user_id() -> None:
    chain = user_chain_id("alice@example.com")
    assert chain == user_chain_id("alice@example.com")
    assert chain != user_chain_id("bob@example.com")
    assert "alice" not in chain
    assert len(chain) == len("user:") + 32
    assert is_user_chain(chain)
    assert not is_user_chain("conv-1")
