"""The embedded server's request parsing: OpenAI request bodies to prompt ids and sampling parameters,
validated and never silently ignored (HTTP 400 otherwise), and the SSE and error bodies it answers with.

Its own module so that the HTTP layer (``embedded_http.py``) and the server (``embedded_server.py``)
both use it without importing each other (no cycle between the harness's modules)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from perfwarden.harness.target_config import EmbeddedConfig

if TYPE_CHECKING:  # the engine imports torch, which the server loads only after its port is bound
    from perfwarden.harness.embedded_engine import GenParams

ServerConfig = EmbeddedConfig



class RequestError(ValueError):
    """A client request that cannot be served (HTTP 400), OpenAI error format."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _get_number(body: dict[str, Any], key: str, default: float, lo: float, hi: float,
                integer: bool = False) -> float:
    value = body.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise RequestError(f"{key!r} must be {'an integer' if integer else 'a number'}, got {value!r}", key)
    if not lo <= value <= hi:
        raise RequestError(f"{key!r} must be between {lo} and {hi}, got {value!r}", key)
    return value


_UNSUPPORTED = {
    "n": 1, "best_of": 1, "echo": False, "logprobs": None, "top_logprobs": None, "suffix": None,
    "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "tools": None, "functions": None,
}


def parse_common(body: dict[str, Any], cfg: ServerConfig, prompt_len: int) -> tuple[GenParams, bool, bool]:
    """Sampling parameters and stream flags shared by both endpoints (validated, never ignored)."""
    from perfwarden.harness.embedded_engine import GenParams  # lazy: torch: imported after the port is bound

    for key, neutral in _UNSUPPORTED.items():
        if key in body and body[key] not in (neutral, None) and not (key == "logprobs" and body[key] is False):
            raise RequestError(f"{key!r}={body[key]!r} is not supported by the embedded target", key)
    stop = body.get("stop")
    if stop not in (None, [], ""):
        raise RequestError("'stop' sequences are not supported by the embedded target", "stop")
    room = cfg.max_seq_len - prompt_len
    if room < 1:
        raise RequestError(f"prompt has {prompt_len} tokens; max_seq_len is {cfg.max_seq_len}", "prompt")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is None:
        max_tokens = min(cfg.default_max_tokens, room)
    max_tokens = _get_number({"max_tokens": max_tokens}, "max_tokens", 0, 1, room, integer=True)
    temperature = float(_get_number(body, "temperature", 1.0, 0.0, 2.0))
    top_p = float(_get_number(body, "top_p", 1.0, 1e-6, 1.0))
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(f"'seed' must be an integer, got {seed!r}", "seed")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise RequestError(f"'ignore_eos' must be a boolean, got {ignore_eos!r}", "ignore_eos")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"'stream' must be a boolean, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage", False)) if isinstance(options, dict) else False
    params = GenParams(max_tokens=int(max_tokens), temperature=temperature, top_p=top_p,
                       seed=seed, ignore_eos=ignore_eos)
    return params, stream, include_usage


def completion_prompt_ids(body: dict[str, Any], tokenizer: Any, vocab_size: int) -> list[int]:
    """Token ids of a ``/v1/completions`` prompt: a string, a one-element list, or token ids."""
    prompt = body.get("prompt")
    ids: list[int]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"prompt token ids out of range [0, {vocab_size}): {bad[:5]!r}", "prompt")
        ids = list(prompt)
    else:
        raise RequestError("'prompt' must be a string, a one-element list, or a list of token ids", "prompt")
    if not ids:
        raise RequestError("'prompt' is empty", "prompt")
    return ids


def chat_prompt_ids(body: dict[str, Any], tokenizer: Any) -> list[int]:
    """Token ids of a chat request: the model's chat template with the generation prompt appended."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    clean = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant"):
            raise RequestError(f"messages[{i}] needs a role of 'system', 'user' or 'assistant'", "messages")
        content = msg.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise RequestError(f"messages[{i}] has a non-text content part; only text is supported", "messages")
                parts.append(part["text"])
            content = "".join(parts)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", "messages")
        clean.append({"role": msg["role"], "content": content})
    encoded = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, holding back a trailing partial character."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = ""

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        return self._delta(text)

    def flush(self) -> str:
        return self._delta(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _delta(self, text: str) -> str:
        # Byte-level BPE decoding is prefix-stable once no partial character trails, so the new text is
        # the old text plus a suffix; what was already streamed cannot be taken back either way.
        delta = text[len(self.sent) :]
        self.sent = text
        return delta


def sse(payload: Any) -> str:
    """One server-sent event line pair."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, separators=(',', ':'))}\n\n"


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: int = 400) -> dict[str, dict[str, Any]]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
