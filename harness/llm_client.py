"""The brains' (and the auditor persona's) client for any OpenAI-compatible chat endpoint: the official
``openai`` package. Every ask sends the pydantic model's strict JSON schema as ``response_format``
(structured output: vLLM, SGLang and the embedded server constrain decoding to it), and every answer is
validated by the model. It lives in the harness, not among the producers, so the auditor uses it without
importing producer code.

Configured by ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (design §5), so vLLM, SGLang, llama.cpp or a
hosted API work as users expect. The openai client retries transport failures (connection errors,
timeouts, 408/409/429/5xx, with backoff); what is left after its retries raises ``LLMUnavailable``.
Errors are classified by fault: a model's bad output (not JSON, a schema violation, a refusal, a
truncated answer) is retried with the validation error shown to the model, and after the last retry
raises ``LLMOutputError`` -- the caller records it and goes on. Token use and failures are counted on
the client (the report shows them).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


class LLMUnavailable(RuntimeError):
    """The endpoint could not be reached or answered with an HTTP error (after the client's retries)."""


class LLMOutputError(ValueError):
    """The model answered, but not with valid output after all retries."""


@dataclass
class Usage:
    """What the brains cost and how often the model's answers were unusable."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    """Chat completions answered by the endpoint."""
    failures: int = 0
    """Answers that were not valid output (each one retried or fallen back from)."""
    unavailable: int = 0
    """Asks that got no answer at all (endpoint down, HTTP error after retries)."""


@dataclass
class LLMClient:
    """One model behind one OpenAI-compatible endpoint."""

    model: str
    base_url: str = field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"))
    api_key: str | None = field(default_factory=lambda: os.environ.get("OPENAI_API_KEY"))
    timeout_s: float = 60.0
    max_retries: int = 2
    """Retries of a failed request (by the openai client) and, separately, of an invalid answer."""
    max_tokens: int | None = None
    """Cap on the answer's length (None: the endpoint's default)."""
    structured: bool = True
    """Ask for the answer's JSON schema through ``response_format`` (False: prompt only, to measure what
    structured output buys: ``benchmarks/brain_validity.py``)."""
    usage: Usage = field(default_factory=Usage)
    transcript: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Local endpoints (vLLM, llama.cpp, the embedded server) take any key; "EMPTY" is their convention.
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                     timeout=self.timeout_s, max_retries=self.max_retries)

    def complete_json(self, system: str, user: str, schema: type[T]) -> T:
        """Ask for one object matching ``schema`` (structured output), validated by pydantic."""
        messages: list[dict[str, str]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        last_error = ""
        for _ in range(self.max_retries + 1):
            text, parsed, error = self._ask(messages, schema)
            if parsed is not None:
                return parsed
            last_error = error
            self.usage.failures += 1
            messages = messages + [{"role": "assistant", "content": text[:4000]},
                                   {"role": "user", "content": "Your answer was not valid: " + last_error +
                                    ". Answer again with only one JSON object matching the schema."}]
        raise LLMOutputError(f"{self.model!r} gave no valid {schema.__name__} after {self.max_retries + 1} "
                             f"tries: {last_error}")

    def _ask(self, messages: list[dict[str, str]], schema: type[T]) -> tuple[str, T | None, str]:
        """One chat completion: (the answer's text, the parsed object or None, why it is invalid)."""
        budget = answer_budget(self.max_tokens, schema)
        extra: dict[str, Any] = {"max_completion_tokens": budget} if budget else {}
        if self.structured:
            extra["response_format"] = response_format(schema)
        started = time.monotonic()
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, temperature=0, **extra)
        except openai.APIStatusError as exc:
            self.usage.unavailable += 1
            raise LLMUnavailable(f"{self.base_url!r} answered HTTP {exc.status_code}: {str(exc.message)[:200]!r}") from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            self.usage.unavailable += 1
            raise LLMUnavailable(f"cannot reach {self.base_url!r}: {type(exc).__name__}: {exc}") from None
        self.usage.calls += 1
        self.transcript.append({"messages": len(messages), "status": raw.http_response.status_code,
                                "seconds": round(time.monotonic() - started, 3)})
        try:
            body = raw.http_response.json()
            choice = body["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            usage = body.get("usage") or {}
            self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            return "", None, f"the endpoint's body is not a chat completion ({type(exc).__name__})"
        return (text, *parse_answer(text, message.get("refusal"), choice.get("finish_reason"), schema))


def answer_budget(cap: int | None, schema: type[BaseModel]) -> int | None:
    """One answer's token budget: the configured cap (None: the endpoint's default), raised to the tokens the
    schema's longest answer needs where it states them (``ANSWER_TOKENS``): below that a valid answer is cut,
    and a cut answer is invalid."""
    need = getattr(schema, "ANSWER_TOKENS", None)
    return max(cap, need) if cap and isinstance(need, int) else cap


def response_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The ``response_format`` asking for ``schema``'s JSON schema, strict (every field required, no
    extra keys), as vLLM, SGLang, the hosted API and the embedded server read it."""
    strict = openai.pydantic_function_tool(schema)["function"]["parameters"]  # the client's strict conversion
    return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": strict, "strict": True}}


def parse_answer(text: str, refusal: Any, finish_reason: Any, schema: type[T]) -> tuple[T | None, str]:
    """The answer validated by ``schema`` (None and why not). Endpoints that ignore ``response_format``
    (weak local models) often wrap a valid object in prose or a code fence: it is accepted when the
    object itself validates."""
    if refusal:
        return None, f"the model refused: {str(refusal)[:200]}"
    if not text.strip():
        return None, "the answer is empty"
    try:
        return schema.model_validate_json(text), ""
    except ValidationError as exc:
        error = _first_line(exc)
    try:
        return schema.model_validate_json(extract_json(text)), ""
    except (ValidationError, ValueError) as exc:
        if finish_reason == "length":
            return None, "the answer was cut at the token limit"
        return None, error if "Invalid JSON" not in error else _first_line(exc)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


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
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
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
