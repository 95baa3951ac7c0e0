"""The auditor persona's model: the run's LLM client behind the small interface the auditor defines
(``auditor/persona.py`` ``PersonaModel``), so the auditor never imports the client itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from perfwarden.auditor.persona import PersonaUnanswered
from perfwarden.harness.llm_client import LLMClient, LLMOutputError, LLMUnavailable

Answer = TypeVar("Answer", bound=BaseModel)


@dataclass(frozen=True)
class LLMPersonaModel:
    """``client``'s structured answers; no answer within its deadline, or none that validates, is the
    persona's ``PersonaUnanswered`` (with the client's own message)."""

    client: LLMClient

    def complete_json(self, system: str, user: str, schema: type[Answer]) -> Answer:
        try:
            return self.client.complete_json(system, user, schema)
        except (LLMUnavailable, LLMOutputError) as exc:
            raise PersonaUnanswered(str(exc)) from exc


def persona_model(client: LLMClient | None) -> LLMPersonaModel | None:
    """The persona's model for a run with ``client`` (None: no LLM configured, the gates alone judge)."""
    return None if client is None else LLMPersonaModel(client)
