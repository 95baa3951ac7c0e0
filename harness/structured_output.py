"""Structured output for the embedded server: ``response_format`` with a JSON schema, honoured by a token
mask per decoding step (llguidance), so that a weak local model can still only emit schema-valid JSON.

Why here and not in the client: the LLM brains and the auditor persona ask every OpenAI-compatible
endpoint for their pydantic model's JSON schema (``{"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}``); vLLM and SGLang honour it with a grammar library, and the embedded target must too to be
the brains' endpoint. A request the server cannot honour (an unknown ``type``, a schema that is not an
object or does not compile) is refused with a clear message (HTTP 400), never ignored and never a crash.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.hf
import torch

if TYPE_CHECKING:  # declared in the extension's stub only: no such name at run time
    from llguidance._lib import JsonCompileOptions

MAX_SCHEMA_BYTES = 64 << 10
"""Largest JSON schema a request may carry (serialized): compiling a grammar costs time per byte."""

SUPPORTED_TYPES = ("text", "json_object", "json_schema")

COMPACT: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How the answer is laid out, whatever the schema's ``x-guidance`` says: flexible whitespace lets a weak
model emit newlines until the token limit cuts the object (measured: SmolLM2 did, on the first try)."""


class SchemaError(ValueError):
    """A ``response_format`` the server cannot honour (the HTTP layer answers 400)."""


@dataclass(frozen=True)
class Grammar:
    """A compiled-to-text grammar and what identifies it (the response cache keys on ``digest``)."""

    text: str
    digest: str
    name: str


def grammar_for(response_format: Any) -> Grammar | None:
    """The grammar a request's ``response_format`` asks for (None: free text). Raises ``SchemaError``."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise SchemaError(f"'response_format' must be an object, got {type(response_format).__name__}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _compile({"type": "object"}, "json_object")
    if kind != "json_schema":
        raise SchemaError(f"response_format type {kind!r} is not supported (supported: {', '.join(SUPPORTED_TYPES)})")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise SchemaError("response_format 'json_schema' must be an object with a 'schema'")
    schema, name = spec.get("schema"), spec.get("name", "schema")
    if not isinstance(schema, dict):
        raise SchemaError("response_format json_schema.schema must be a JSON object (a JSON schema)")
    if not isinstance(name, str):
        raise SchemaError("response_format json_schema.name must be a string")
    return _compile(schema, name[:64])


def _compile(schema: dict[str, Any], name: str) -> Grammar:
    try:
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
    except ValueError as exc:
        raise SchemaError(f"response_format schema is not valid JSON: {exc}") from None
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"response_format schema is over {MAX_SCHEMA_BYTES} bytes")
    grammar = llguidance.LLMatcher.grammar_from_json_schema(text, overrides=COMPACT)
    return Grammar(text=grammar, digest=hashlib.sha256(grammar.encode()).hexdigest(), name=name)


class GrammarTokenizer:
    """The model's tokenizer as llguidance sees it, built once (about a second) on first use."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int):
        self._hf = hf_tokenizer
        self.vocab_size = vocab_size
        self._built: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._built is None:
                try:
                    self._built = llguidance.hf.from_tokenizer(self._hf, n_vocab=self.vocab_size)
                except (TypeError, ValueError) as exc:  # a tokenizer llguidance cannot read (not a fast one)
                    raise SchemaError(f"structured output is unavailable for this model's tokenizer: {exc}") from None
            return self._built

    def constraint(self, grammar: Grammar) -> GrammarConstraint:
        """A fresh per-request matcher; a schema llguidance refuses is a ``SchemaError``."""
        tokenizer = self.get()
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar.text, tokenizer)
        if failed:
            raise SchemaError(f"invalid JSON schema in response_format: {messages[0][:300] if messages else 'refused'}")
        matcher = llguidance.LLMatcher(tokenizer, grammar.text, log_level=0)
        if matcher.is_error():
            raise SchemaError(f"invalid JSON schema in response_format: {matcher.get_error()[:300]}")
        return GrammarConstraint(matcher=matcher, vocab_size=self.vocab_size, eos=int(tokenizer.eos_token))


@dataclass
class GrammarConstraint:
    """One request's grammar state: which tokens may come next, and the tokens it has consumed.

    Owned by the scheduler thread once submitted (llguidance matchers are not shared)."""

    matcher: Any
    vocab_size: int
    eos: int

    def allowed(self) -> torch.Tensor:
        """``[vocab]`` bool: the tokens the grammar allows next (EOS alone once it is complete or broken)."""
        if self.matcher.is_error() or self.matcher.is_stopped():
            only = torch.zeros(self.vocab_size, dtype=torch.bool)
            only[self.eos] = True
            return only
        bias = torch.frombuffer(bytearray(self.matcher.compute_logit_bias()), dtype=torch.uint8)
        out = torch.zeros(self.vocab_size, dtype=torch.bool)
        n = min(self.vocab_size, int(bias.numel()))
        out[:n] = bias[:n] > 0
        return out

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (``[..., vocab]``) with every token the grammar forbids at -inf (a new tensor)."""
        allowed = self.allowed()
        width = logits.shape[-1]
        keep = allowed[:width] if width <= allowed.numel() else torch.cat(
            [allowed, torch.zeros(width - allowed.numel(), dtype=torch.bool)])
        return logits.masked_fill(~keep, float("-inf"))

    def advance(self, token: int) -> bool:
        """Consume a sampled token; False when the grammar refused it (never after ``mask``)."""
        return bool(self.matcher.consume_token(int(token)))

    @property
    def complete(self) -> bool:
        """The grammar accepts no further token: the answer is whole."""
        return bool(self.matcher.is_stopped())
