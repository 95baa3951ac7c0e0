"""A small client for any OpenAI-compatible chat endpoint with pydantic-validated structured output.

Configured by ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (design §5). Errors are classified by fault:
a model's bad output (invalid JSON, schema violation) is retried with the validation error shown to the
model, and after the last retry raises ``LLMOutputError`` -- the caller records it and goes on. A
transport failure raises ``LLMUnavailable``. Token use is accumulated on the client.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


class LLMUnavailable(RuntimeError):
    """The endpoint could not be reached or answered with an HTTP error."""


class LLMOutputError(ValueError):
    """The model answered, but not with valid output after all retries."""


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    failures: int = 0


@dataclass
class LLMClient:
    """One model behind one OpenAI-compatible endpoint."""

    model: str
    base_url: str = field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"))
    api_key: str | None = field(default_factory=lambda: os.environ.get("OPENAI_API_KEY"))
    timeout_s: float = 60.0
    max_retries: int = 2
    usage: Usage = field(default_factory=Usage)
    transcript: list[dict[str, Any]] = field(default_factory=list)

    def complete_json(self, system: str, user: str, schema: type[T]) -> T:
        """Ask for one JSON object matching ``schema``; validate it with pydantic."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        last_error = ""
        for attempt in range(self.max_retries + 1):
            text = self._chat(messages, schema)
            try:
                return schema.model_validate_json(extract_json(text))
            except (ValidationError, ValueError) as exc:
                last_error = str(exc).splitlines()[0][:300]
                self.usage.failures += 1
                messages = messages + [{"role": "assistant", "content": text[:4000]},
                                       {"role": "user", "content": "Your answer was not valid: " + last_error +
                                        ". Answer again with only one JSON object matching the schema."}]
        raise LLMOutputError(f"{self.model!r} gave no valid {schema.__name__} after {self.max_retries + 1} "
                             f"tries: {last_error}")

    def _chat(self, messages: list[dict[str, str]], schema: type[BaseModel]) -> str:
        payload = {"model": self.model, "messages": messages, "temperature": 0,
                   "response_format": {"type": "json_schema", "json_schema": {
                       "name": schema.__name__, "schema": schema.model_json_schema()}}}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.base_url.rstrip("/") + "/chat/completions"
        started = time.monotonic()
        try:
            response = httpx.post(url, json=payload, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise LLMUnavailable(f"cannot reach {url!r}: {type(exc).__name__}: {exc}") from None
        self.usage.calls += 1
        self.transcript.append({"request": payload, "status": response.status_code,
                                "seconds": round(time.monotonic() - started, 3)})
        if response.status_code >= 400:
            raise LLMUnavailable(f"{url!r} answered HTTP {response.status_code}: {response.text[:200]!r}")
        try:
            body = response.json()
            usage = body.get("usage") or {}
            self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
            return body["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMOutputError(f"{url!r} answered a body that is not a chat completion: {exc!r}") from None


def extract_json(text: str) -> str:
    """The first JSON object in a reply (models sometimes wrap it in prose or a code fence)."""
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    if fenced:
        return fenced.group(1)
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the reply")
    depth = 0
    in_str = esc = False
    for i, ch in enumerate(text[start:], start):
        if in_str:
            esc = (ch == "\\") and not esc
            if ch == '"' and not esc:
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                candidate = text[start:i + 1]
                json.loads(candidate)
                return candidate
    raise ValueError("unterminated JSON object in the reply")
