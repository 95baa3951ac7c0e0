"""The brains' (and the auditor persona's) client for any OpenAI-compatible chat endpoint, with hard bounds.

Every ask sends the pydantic model's strict JSON schema as ``response_format`` (structured output: vLLM,
SGLang, the hosted API and the embedded server constrain decoding to it), and every answer is validated
by the model. It lives in the harness, not among the producers, so the auditor uses it without importing
producer code. Configured by ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (design §5).

The endpoint is untrusted (design §5, "LLM asks"), so one ask (``complete_json``) is bounded whatever it
answers: one deadline covers the connect, every read and every retry (``timeout_s``, shortened to the
run's remaining budget by ``time_left``; no budget left, no ask); the answer is read streamed and cut at
``answer_bytes`` (``harness/llm_transport.py``); the chat completion's every field the client uses is
type-checked before use (content text or null, token counts plain integers), and the answer's numbers
must be finite and safe integers. Errors are classified by fault: no answer within the deadline (the
endpoint down, HTTP errors after retries) raises ``LLMUnavailable``; a bad answer (not a chat completion,
over the cap, not JSON, too deep, a schema violation, a refusal, a truncated answer) is retried with the
validation error shown to the model while the deadline allows, then raises ``LLMOutputError``. Both are
caught by the callers: a producer falls back to its policy, the persona marks the verdict degraded. Token
use and failures are counted on the client (the report shows them).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfwarden.formats import strict_json
from perfwarden.harness.llm_transport import Deadline, EndpointUnavailable, HttpAnswer, post_json

T = TypeVar("T", bound=BaseModel)

ANSWER_BYTES = 2 << 20
"""Cap on one chat completion's bytes. The longest answer asked for (the kernel-extractor's 1,536 tokens,
or ``llm_max_tokens`` at its 131,072 bound, about 512 KiB of text, twice that escaped) fits; more is an
endpoint misbehaving, cut there and not read."""
MAX_COUNTED_TOKENS = 2**31 - 1
"""Largest token count a ``usage`` may state (no context window comes near it)."""
SAFE_INTEGER = 2**53
"""Integers in an answer stay within what every JSON reader of the run keeps exactly."""
EXTRACT_CHARS = 64 << 10
"""Characters of a reply searched for a JSON object wrapped in prose (a valid answer is a few KiB)."""


class LLMUnavailable(RuntimeError):
    """No answer within the ask's deadline: the endpoint down, an HTTP error after retries, no budget left."""


class LLMOutputError(ValueError):
    """The endpoint answered, but not with valid output, however many retries the deadline allowed."""


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
    """Asks that got no answer at all (endpoint down, HTTP error after retries, deadline or budget spent)."""


class _WireRecord(BaseModel):
    """A part of the endpoint's answer: types exactly as stated (a number is never text), fields the client
    does not use ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


class ChatMessage(_WireRecord):
    content: str | None = None
    refusal: str | None = None


class ChatChoice(_WireRecord):
    message: ChatMessage
    finish_reason: str | None = None


class TokenUsage(_WireRecord):
    prompt_tokens: int | None = Field(None, ge=0, le=MAX_COUNTED_TOKENS)
    completion_tokens: int | None = Field(None, ge=0, le=MAX_COUNTED_TOKENS)


class ChatCompletion(_WireRecord):
    """The fields of an OpenAI chat completion the client reads."""

    choices: list[ChatChoice] = Field(min_length=1)
    usage: TokenUsage | None = None


class _ErrorDetail(_WireRecord):
    message: str


class _ErrorBody(_WireRecord):
    error: _ErrorDetail


@dataclass
class LLMClient:
    """One model behind one OpenAI-compatible endpoint."""

    model: str
    base_url: str = field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"))
    api_key: str | None = field(default_factory=lambda: os.environ.get("OPENAI_API_KEY"))
    timeout_s: float = 60.0
    """Deadline of one ask: connect, every read, every retry (the run's remaining budget shortens it)."""
    max_retries: int = 2
    """Retries of a failed request and, separately, of an invalid answer, all within the ask's deadline."""
    max_tokens: int | None = None
    """Cap on the answer's length (None: the endpoint's default)."""
    structured: bool = True
    """Ask for the answer's JSON schema through ``response_format`` (False: prompt only, to measure what
    structured output buys: ``benchmarks/brain_validity.py``)."""
    answer_bytes: int = ANSWER_BYTES
    time_left: Callable[[], float] | None = None
    """Seconds left in the run's budget (the graph sets it for each step; None: no budget, ``timeout_s``
    alone bounds an ask)."""
    usage: Usage = field(default_factory=Usage)

    @property
    def chat_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def ask_seconds(self) -> float:
        """This ask's deadline: ``timeout_s``, or the run's remaining budget when that is shorter (a budget
        that is not a number leaves no time)."""
        budget = self.time_left() if self.time_left is not None else math.inf
        return 0.0 if math.isnan(budget) else min(self.timeout_s, budget)

    def complete_json(self, system: str, user: str, schema: type[T]) -> T:
        """Ask for one object matching ``schema`` (structured output), validated by pydantic, within one
        deadline (LLMUnavailable when none is left)."""
        seconds = self.ask_seconds()
        if not seconds > 0:
            self.usage.unavailable += 1
            raise LLMUnavailable("the run's budget is spent: no time is left for an LLM ask")
        deadline = Deadline.after(seconds)
        messages: list[dict[str, str]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        last_error = ""
        tries = 0
        while tries <= self.max_retries and (tries == 0 or deadline.left() > 0):
            tries += 1
            text, parsed, error = self._ask(messages, schema, deadline)
            if parsed is not None:
                return parsed
            last_error = error
            self.usage.failures += 1
            messages = messages + [{"role": "assistant", "content": text[:4000]},
                                   {"role": "user", "content": "Your answer was not valid: " + last_error +
                                    ". Answer again with only one JSON object matching the schema."}]
        raise LLMOutputError(f"{self.model!r} gave no valid {schema.__name__} in {tries} tries "
                             f"within {seconds:.0f} s: {last_error}")

    def _headers(self) -> dict[str, str]:
        # Local endpoints (vLLM, llama.cpp, the embedded server) take any key; "EMPTY" is their convention.
        # ``identity``: a compressed body would be inflated past the byte cap before anything counts it.
        return {"Authorization": f"Bearer {self.api_key or 'EMPTY'}", "Content-Type": "application/json",
                "Accept": "application/json", "Accept-Encoding": "identity"}

    def _ask(self, messages: list[dict[str, str]], schema: type[T], deadline: Deadline) -> tuple[str, T | None, str]:
        """One chat completion: (the answer's text, the parsed object or None, why it is invalid)."""
        budget = answer_budget(self.max_tokens, schema)
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
        if budget:
            payload["max_completion_tokens"] = budget
        if self.structured:
            payload["response_format"] = response_format(schema)
        body = json.dumps(payload, ensure_ascii=True, allow_nan=False).encode()
        try:
            answer = post_json(self.chat_url, self._headers(), body, self.answer_bytes, self.max_retries, deadline)
        except EndpointUnavailable as exc:
            self.usage.unavailable += 1
            raise LLMUnavailable(f"no answer from {self.base_url!r}: {exc}") from None
        if answer.status != 200:
            self.usage.unavailable += 1
            raise LLMUnavailable(f"{self.base_url!r} answered HTTP {answer.status}: {error_message(answer.body)!r}")
        self.usage.calls += 1
        completion, why = read_completion(answer, self.answer_bytes)
        if completion is None:
            return "", None, why
        if completion.usage is not None:
            self.usage.prompt_tokens += completion.usage.prompt_tokens or 0
            self.usage.completion_tokens += completion.usage.completion_tokens or 0
        choice = completion.choices[0]
        text = choice.message.content or ""
        return (text, *parse_answer(text, choice.message.refusal, choice.finish_reason, schema))


def read_completion(answer: HttpAnswer, cap: int) -> tuple[ChatCompletion | None, str]:
    """The endpoint's 200 answer as a chat completion (None and why not): declared JSON, not encoded, whole
    (not cut at the cap), and every field the client reads of the right type."""
    if answer.cut:
        return None, f"the endpoint's answer is over the cap of {cap:,} bytes (it was cut there)"
    if answer.content_type != "application/json":
        return None, f"the endpoint's answer is of type {answer.content_type or '(none)'!r}, not 'application/json'"
    if answer.content_encoding != "identity":
        return None, f"the endpoint's answer is encoded ({answer.content_encoding[:40]!r}), not sent as is"
    try:
        return ChatCompletion.model_validate_json(answer.body), ""
    except ValidationError as exc:
        return None, f"the endpoint's body is not a chat completion: {_why(exc)}"


def error_message(body: bytes) -> str:
    """An error body's ``error.message``, else its first characters."""
    try:
        return _ErrorBody.model_validate_json(body).error.message[:200]
    except ValidationError:
        return body[:200].decode("utf-8", "replace")


def _why(exc: ValidationError) -> str:
    """A validation error's first problem, in one line (where, what), never the input's text."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return type(exc).__name__
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{where}: " if where else "") + str(first["msg"])[:200] + more


def outsized_number(value: object) -> str | None:
    """The first number in a parsed answer that is not finite or not a safe integer (None: all are plain).
    Iterative: the answer's nesting is no concern of the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, float) and not math.isfinite(item):
            return repr(item)
        if isinstance(item, int) and abs(item) > SAFE_INTEGER:
            return f"an integer of {len(str(abs(item)))} digits"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return None


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


def parse_answer(text: str, refusal: str | None, finish_reason: str | None, schema: type[T]) -> tuple[T | None, str]:
    """The answer validated by ``schema`` (None and why not). Endpoints that ignore ``response_format``
    (weak local models) often wrap a valid object in prose or a code fence: it is accepted when the
    object itself validates. Either way its numbers must be plain (``outsized_number``)."""
    if refusal:
        return None, f"the model refused: {refusal[:200]}"
    if not text.strip():
        return None, "the answer is empty"
    try:
        return _plain(schema.model_validate_json(text))
    except ValidationError as exc:
        error = _why(exc)
        not_json = any(e["type"] == "json_invalid" for e in exc.errors(include_url=False, include_input=False))
    try:
        return _plain(schema.model_validate_json(extract_json(text)))
    except ValidationError as exc:  # a wrapped object that is not the schema's: say why, not "invalid JSON"
        error = _why(exc) if not_json else error
    except ValueError as exc:
        error = str(exc) if not_json else error
    if finish_reason == "length":
        return None, "the answer was cut at the token limit"
    return None, error


def _plain(parsed: T) -> tuple[T | None, str]:
    bad = outsized_number(parsed.model_dump())
    return (parsed, "") if bad is None else (None, f"a number in the answer is out of range: {bad}")


_FENCE = re.compile(r"```(?:json)?\s*\{")


def extract_json(text: str) -> str:
    """The first JSON object in a reply (models sometimes wrap it in prose or a code fence), looked for in
    its first ``EXTRACT_CHARS`` characters, in one linear pass; ValueError when there is none."""
    text = text[:EXTRACT_CHARS]
    fenced = _FENCE.search(text)
    start = fenced.end() - 1 if fenced else text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the reply")
    candidate = text[start:_object_end(text, start)]
    strict_json.loads(candidate, what="the reply's JSON object")  # too deep, not strict JSON: a ValueError
    return candidate


def _object_end(text: str, start: int) -> int:
    """The index after the brace that closes the object opening at ``start`` (braces in strings skipped)."""
    depth = 0
    in_str = esc = False
    for i in range(start, len(text)):
        ch = text[i]
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
                return i + 1
    raise ValueError("unterminated JSON object in the reply")
