"""Versioned system prompts, one file per expert prompt, and their loader."""

from frontdesk.errors import PromptError, PromptVariableError
from frontdesk.prompts.loader import (
    Prompt,
    PromptMeta,
    RenderedPrompt,
    builtin_names,
    load_builtin,
    load_prompt,
    parse_prompt,
)

__all__ = [
    "Prompt",
    "PromptError",
    "PromptMeta",
    "PromptVariableError",
    "RenderedPrompt",
    "builtin_names",
    "load_builtin",
    "load_prompt",
    "parse_prompt",
]
