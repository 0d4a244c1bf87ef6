"""The providers package's public names."""

from __future__ import annotations

import frontdesk.experts.providers as providers


def test_all_is_sorted_and_importable() -> None:
    assert providers.__all__ == sorted(providers.__all__)
    for name in providers.__all__:
        assert getattr(providers, name) is not None


def test_no_sdk_exception_type_is_exported() -> None:
    for name in providers.__all__:
        module = getattr(getattr(providers, name), "__module__", "")
        assert not module.startswith(("anthropic", "openai"))
