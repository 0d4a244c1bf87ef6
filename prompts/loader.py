"""Versioned prompt files: one Markdown file per expert prompt, with front matter.

A prompt file looks like::

    ---
    name: triage
    version: "1"
    variables: [categories]
    ---
    You sort customer messages ...

It is rendered with a sandboxed Jinja environment whose undefined variables raise, so a
missing variable is a typed `PromptVariableError`, never a silently empty hole. The audit
log records the prompt's name, version and the sha256 of the rendered text.
"""

from __future__ import annotations

import hashlib
from functools import cache, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, ValidationError

from frontdesk.errors import PromptError, PromptVariableError

_ENV = SandboxedEnvironment(
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
    autoescape=False,
)


def _package_files() -> Traversable:
    """The installed prompt files (inside the wheel, or the source folder when editable)."""
    return resources.files(__package__ or "frontdesk.prompts")


@lru_cache(maxsize=64)
def _compiled(template: str) -> jinja2.Template:
    """Compiled once: the triage prompt is rendered for each message when its categories do
    not all fit its allowance (`experts/triage_fit.py`)."""
    return _ENV.from_string(template)


class PromptMeta(BaseModel):
    """A prompt file's front matter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    variables: tuple[str, ...] = ()
    description: str = ""


@lru_cache(maxsize=256)
def _sha256(text: str) -> str:
    """Remembered: every call of an expert hashes its (mostly unchanging) system prompt."""
    return hashlib.sha256(text.encode()).hexdigest()


class RenderedPrompt(BaseModel):
    """A prompt ready to send: its text and the reference the audit log keeps."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    text: str

    @property
    def sha256(self) -> str:
        """The hash of the rendered text."""
        return _sha256(self.text)


class Prompt(BaseModel):
    """A loaded prompt template."""

    model_config = ConfigDict(frozen=True)

    meta: PromptMeta
    template: str
    source: str

    @property
    def name(self) -> str:
        """The prompt's name."""
        return self.meta.name

    @property
    def version(self) -> str:
        """The prompt's version."""
        return self.meta.version

    @property
    def template_sha256(self) -> str:
        """The hash of the template text, for `versions.lock`."""
        return hashlib.sha256(self.template.encode()).hexdigest()

    def render(self, **variables: Any) -> RenderedPrompt:
        """Render the template.

        Raises:
            PromptVariableError: if the template uses a variable not given.
        """
        try:
            text = _compiled(self.template).render(**variables)
        except jinja2.UndefinedError as e:
            raise PromptVariableError(
                f"prompt {self.name!r} ({self.source}) needs a variable that was not given: {e}"
            ) from e
        return RenderedPrompt(name=self.name, version=self.version, text=text.strip())


def parse_prompt(text: str, *, source: str) -> Prompt:
    """Parse a prompt file's text (front matter + template)."""
    if not text.startswith("---\n"):
        raise PromptError(f"{source}: a prompt file starts with '---' front matter")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise PromptError(f"{source}: front matter is not closed by a '---' line")
    try:
        meta = PromptMeta.model_validate(_parse_front_matter(head, source))
    except ValidationError as e:
        raise PromptError(f"{source}: bad front matter: {e}") from e
    return Prompt(meta=meta, template=body.strip() + "\n", source=source)


def _parse_front_matter(head: str, source: str) -> dict[str, Any]:
    """A tiny `key: value` / `key: [a, b]` reader, enough for prompt front matter."""
    data: dict[str, Any] = {}
    for line in head.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise PromptError(f"{source}: front matter line {line!r} is not 'key: value'")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            data[key.strip()] = tuple(v.strip().strip("'\"") for v in value[1:-1].split(",") if v)
        else:
            data[key.strip()] = value.strip("'\"")
    return data


@cache
def load_builtin(name: str) -> Prompt:
    """Load a prompt shipped in this package (`prompts/<name>.md`)."""
    try:
        text = _package_files().joinpath(f"{name}.md").read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise PromptError(f"no built-in prompt named {name!r} (prompts/{name}.md)") from e
    return parse_prompt(text, source=f"prompts/{name}.md")


def load_prompt(name: str, *, directory: Path | None = None) -> Prompt:
    """Load a prompt by name, from `directory` when it has `<name>.md`, else the built-in.

    `directory` lets ops replay recorded turns against edited prompts without touching the
    installed package.
    """
    if directory is not None:
        path = directory / f"{name}.md"
        if path.exists():
            return parse_prompt(path.read_text(encoding="utf-8"), source=str(path))
    return load_builtin(name)


def builtin_names() -> list[str]:
    """Names of every prompt shipped in this package."""
    return sorted(
        p.name[:-3]
        for p in resources.files("frontdesk.prompts").iterdir()
        if p.name.endswith(".md")
    )
