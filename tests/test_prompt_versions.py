"""A prompt's text never changes without its version: `prompts/versions.lock` pins both.

Replays and audit rows name prompts by (name, version); if the text changed under the same
version, an ops person comparing two runs would be comparing different prompts unawares.
After editing a prompt, bump its `version:` and run
`python -m prompts.lock` to rewrite the lock file.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from frontdesk.prompts import builtin_names, load_builtin
from frontdesk.prompts.lock import current_lock

LOCK = json.loads(resources.files("frontdesk.prompts").joinpath("versions.lock").read_text())


@pytest.mark.parametrize("name", builtin_names())
def test_a_prompt_text_change_comes_with_a_new_version(name: str) -> None:
    prompt = load_builtin(name)
    pinned = LOCK.get(name)
    assert pinned is not None, (
        f"prompts/{name}.md is not in versions.lock; run python -m prompts.lock"
    )
    if prompt.template_sha256 != pinned["sha256"]:
        assert prompt.version != pinned["version"], (
            f"prompts/{name}.md changed but its version is still {prompt.version!r}:"
            " bump `version:` in its front matter, then run python -m prompts.lock"
        )
        pytest.fail(f"prompts/{name}.md has a new version; run python -m prompts.lock")


def test_the_lock_lists_exactly_the_shipped_prompts() -> None:
    assert LOCK == current_lock()
