"""Persona prompts as markdown (``skills/<name>/skill.md``), loaded and rendered in one place.

Prompts are templates rendered strictly (a missing variable is our bug and raises, as smolagents does),
and anything that came from a model, a server log or a claim is fenced as untrusted data first.
"""

from __future__ import annotations

from importlib import resources


class StrictDict(dict):
    """A template context where a missing variable is our bug, not a silent empty string."""

    def __missing__(self, key: str):
        raise KeyError(f"prompt template variable {key!r} was not provided")


def load_skill(name: str) -> str:
    """The markdown of ``skills/<name>/skill.md`` (package data)."""
    return resources.files("perfwarden.skills").joinpath(name, "skill.md").read_text("utf-8")


def render_prompt(template: str, **values: str) -> str:
    """Render strictly: every ``{name}`` must be given."""
    return template.format_map(StrictDict(values))


def render_skill(name: str, **values: str) -> str:
    """Load and render one skill."""
    return render_prompt(load_skill(name), **values)


def fence(text: str) -> str:
    """Neutralize attempts to close the untrusted fence from inside the data."""
    return text.replace("</untrusted_data", "<\u200b/untrusted_data").replace("<untrusted_data", "<\u200buntrusted_data")
