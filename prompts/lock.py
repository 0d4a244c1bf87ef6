"""`python -m frontdesk.prompts.lock`: rewrite `versions.lock` from the shipped prompt files."""

from __future__ import annotations

import json
from pathlib import Path

from frontdesk.prompts.loader import builtin_names, load_builtin

LOCK_FILE = Path(__file__).with_name("versions.lock")


def current_lock() -> dict[str, dict[str, str]]:
    """Each shipped prompt's version and template hash."""
    return {
        name: {"sha256": load_builtin(name).template_sha256, "version": load_builtin(name).version}
        for name in builtin_names()
    }


def main() -> None:
    """Write the lock file."""
    LOCK_FILE.write_text(json.dumps(current_lock(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {LOCK_FILE.name}: {', '.join(sorted(current_lock()))}")


if __name__ == "__main__":
    main()
