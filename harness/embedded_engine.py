"""The embedded target's decoding engine: a scheduler thread with continuous batching over a KV cache.

Why this shape: the knobs the optimizer turns (batch size, batch wait, prompt-lookup decoding, a
response cache, op overrides) must be *real* mechanisms whose effects show up in timings and in the
server log, exactly as they would on SGLang/vLLM. So:

- one scheduler thread owns the model; HTTP handlers only enqueue requests and read events;
- when idle, the scheduler waits up to ``batch_wait_ms`` for up to ``max_batch_size`` requests, then
  prefills them together (left padding + attention mask); while a batch runs, new requests are admitted
  at every step (prefilled, then merged into the running KV cache) — continuous batching;
- each decode step feeds one token per sequence (or, with prompt lookup, the token plus its drafted
  continuation), and streams every accepted token as soon as it exists;
- finished or cancelled sequences leave the batch at once; leading cache columns no sequence needs are
  trimmed.

Positions are tracked per sequence (``position_ids``) while the KV cache is indexed by column, so left
padding, merged batches and rejected draft tokens all become masked columns ("holes") that no query
attends to. Numerics depend on batch composition (as on every batching server): greedy outputs match
unbatched greedy outputs up to rare floating-point ties.

Devices: the KV cache, masks and positions live on the model's device (``--set device=cuda``); token
ids are built on the host and moved once per step, and each step's logits come back to the host once,
where sampling (seeded ``torch.Generator``s are CPU generators) and draft verification run unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

from perfwarden.harness.target_config import EmbeddedConfig

if TYPE_CHECKING:  # transformers loads when the first cache is made (seconds to import)
    from transformers import DynamicCache

log = logging.getLogger("perfwarden.embedded")

FinishReason = Literal["stop", "length", "error", "cancelled"]


# --------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class GenParams:
    """Sampling parameters of one request (already validated by the HTTP layer)."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    grammar_digest: str | None = None
    """The ``response_format`` grammar the output must match (its digest; None: free text)."""


@dataclass
class TokenEvent:
    """New output token ids (one, or several when draft tokens were accepted)."""

    token_ids: list[int]


@dataclass
class DoneEvent:
    """The request finished; ``usage`` is the OpenAI usage object plus perfwarden's extensions."""

    finish_reason: FinishReason
    usage: dict[str, Any]


@dataclass
class ErrorEvent:
    """The request failed inside the server (our fault or an override's), with a message for the client."""

    message: str
    kind: str


Event = TokenEvent | DoneEvent | ErrorEvent


@dataclass
class SpecStats:
    """Prompt-lookup statistics of one request."""

    verify_steps: int = 0
    """Decode forward passes that verified a draft (or decoded without one)."""
    drafted: int = 0
    """Draft tokens proposed."""
    accepted: int = 0
    """Draft tokens accepted."""
    produced: int = 0
    """Tokens produced by verify steps (accepted drafts + one model token per step)."""


@dataclass
class GenRequest:
    """One generation request as the scheduler sees it."""

    rid: str
    prompt_ids: list[int]
    params: GenParams
    emit: Callable[[Event], None]
    """Thread-safe event sink (the HTTP layer hands events to its event loop)."""
    arrival: float = field(default_factory=time.monotonic)
    generated: list[int] = field(default_factory=list)
    spec: SpecStats = field(default_factory=SpecStats)
    cancelled: bool = False
    """Set by the HTTP layer when the client went away."""
    generator: torch.Generator | None = None
    first_token_at: float | None = None
    finish: FinishReason | None = None
    """Set once the request has produced its last token."""
    constraint: Any = None
    """A ``structured_output.GrammarConstraint`` (``mask``, ``advance``, ``complete``) when the output must
    match a grammar: every sampled token is drawn from the tokens it allows, and no draft is proposed."""

    def cache_key(self) -> str:
        """Identity of the request for the response cache: same prompt tokens and sampling parameters."""
        p = self.params
        blob = json.dumps(
            [self.prompt_ids, p.max_tokens, p.temperature, p.top_p, p.seed, p.ignore_eos, p.grammar_digest],
            separators=(",", ":")
        )
        return hashlib.sha256(blob.encode()).hexdigest()


# ------------------------------------------------------------------------------------ pure helpers


def prompt_lookup_draft(tokens: list[int], num_draft: int, max_ngram: int, min_ngram: int = 1) -> list[int]:
    """Propose up to ``num_draft`` tokens by matching the last n-gram earlier in ``tokens``.

    Tries n from ``max_ngram`` down to ``min_ngram``; for each n, takes the *most recent* earlier
    occurrence of the last n tokens and proposes what followed it. Empty when nothing matches.
    """
    n_tokens = len(tokens)
    if num_draft <= 0:
        return []
    for n in range(min(max_ngram, n_tokens - 1), min_ngram - 1, -1):
        suffix = tokens[n_tokens - n :]
        for start in range(n_tokens - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                follow = tokens[start + n : start + n + num_draft]
                if follow:
                    return follow
    return []


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Probabilities to sample from (float32), with temperature and nucleus (top-p) filtering."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        keep[0] = True
        filtered = torch.zeros_like(probs)
        filtered[idx[keep]] = sorted_p[keep]
        probs = filtered / filtered.sum()
    return probs


def choose_token(logits: torch.Tensor, params: GenParams, generator: torch.Generator | None) -> int:
    """Greedy when ``temperature == 0``, otherwise a seeded sample."""
    if params.temperature == 0.0:
        return int(torch.argmax(logits))
    probs = sampling_probs(logits, params.temperature, params.top_p)
    return int(torch.multinomial(probs, 1, generator=generator))


def verify_draft(
    logits: torch.Tensor, draft: list[int], params: GenParams, generator: torch.Generator | None
) -> tuple[int, int]:
    """Check ``draft`` against the model's logits at each draft position.

    ``logits[j]`` is the model's distribution for the token after draft position ``j - 1`` (row 0
    follows the last committed token). Returns ``(accepted, next_token)``: how many draft tokens are
    kept, and the model's own token after them. Greedy: a draft token is kept when it is the argmax.
    Sampling: speculative sampling with a deterministic draft (keep with probability p(draft); on
    rejection sample from p with the draft token removed), which leaves the output distribution exact.
    """
    for j, token in enumerate(draft):
        row = logits[j]
        if params.temperature == 0.0:
            best = int(torch.argmax(row))
            if best != token:
                return j, best
            continue
        probs = sampling_probs(row, params.temperature, params.top_p)
        u = float(torch.rand((), generator=generator))
        if u < float(probs[token]):
            continue
        probs = probs.clone()
        probs[token] = 0.0
        total = float(probs.sum())
        if total <= 0.0:  # the draft token held all the mass: nothing else can be sampled
            return j, token
        return j, int(torch.multinomial(probs / total, 1, generator=generator))
    return len(draft), choose_token(logits[len(draft)], params, generator)


def _constrained(req: GenRequest, logits: torch.Tensor) -> torch.Tensor:
    """The logits a request samples from: its grammar's mask applied when it has one."""
    return logits if req.constraint is None else req.constraint.mask(logits)


# ---------------------------------------------------------------------------------------- kv cache


def _layers(cache: Any) -> list[Any]:
    return list(cache.layers)


def cache_from_tensors(tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A ``DynamicCache`` holding the given per-layer (keys, values)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=tensors)


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) of a ``DynamicCache`` (shape ``[batch, heads, columns, head_dim]``)."""
    return [(layer.keys, layer.values) for layer in _layers(cache)]


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    if width == 0:
        return t
    shape = list(t.shape)
    shape[dim] = width
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


@dataclass
class Batch:
    """The running batch: requests, their KV cache, and per-sequence bookkeeping."""

    reqs: list[GenRequest]
    cache: DynamicCache
    mask: torch.Tensor
    """``[B, columns]`` bool: which cache columns hold real tokens of each sequence."""
    next_pos: torch.Tensor
    """``[B]`` long: position id of each sequence's next token."""
    last_token: torch.Tensor
    """``[B]`` long, on the host: each sequence's newest token, not yet in the cache."""

    @property
    def columns(self) -> int:
        return int(self.mask.shape[1])


def merge_batches(a: Batch, b: Batch) -> Batch:
    """One batch from two: left-pad the shorter cache (masked columns), concatenate along the batch."""
    width = max(a.columns, b.columns)
    pa, pb = width - a.columns, width - b.columns
    tensors = []
    for (ka, va), (kb, vb) in zip(cache_tensors(a.cache), cache_tensors(b.cache), strict=True):
        tensors.append(
            (
                torch.cat([_left_pad(ka, pa, 2), _left_pad(kb, pb, 2)], dim=0),
                torch.cat([_left_pad(va, pa, 2), _left_pad(vb, pb, 2)], dim=0),
            )
        )
    return Batch(
        reqs=a.reqs + b.reqs,
        cache=cache_from_tensors(tensors),
        mask=torch.cat([_left_pad(a.mask, pa, 1), _left_pad(b.mask, pb, 1)], dim=0),
        next_pos=torch.cat([a.next_pos, b.next_pos]),
        last_token=torch.cat([a.last_token, b.last_token]),
    )


def select_rows(batch: Batch, keep: list[int]) -> Batch:
    """Keep only the sequences at ``keep``, then drop leading columns none of them uses."""
    idx = torch.tensor(keep, dtype=torch.long)
    dev_idx = idx.to(batch.mask.device)
    mask = batch.mask[dev_idx]
    used = mask.any(dim=0).nonzero()
    first = int(used[0]) if len(used) else mask.shape[1]
    tensors = [(k[dev_idx][:, :, first:], v[dev_idx][:, :, first:]) for k, v in cache_tensors(batch.cache)]
    return Batch(
        reqs=[batch.reqs[i] for i in keep],
        cache=cache_from_tensors(tensors),
        mask=mask[:, first:],
        next_pos=batch.next_pos[dev_idx],
        last_token=batch.last_token[idx],
    )


# ------------------------------------------------------------------------------------------ engine


_DEFAULTS = EmbeddedConfig.defaults()  # one place for every knob's default (harness/target_config.py)


@dataclass(frozen=True)
class EngineOptions:
    """The knobs the engine itself uses (the server validates them first)."""

    max_batch_size: int = _DEFAULTS["max_batch_size"]
    batch_wait_ms: float = _DEFAULTS["batch_wait_ms"]
    prompt_lookup: bool = _DEFAULTS["prompt_lookup"]
    prompt_lookup_num_tokens: int = _DEFAULTS["prompt_lookup_num_tokens"]
    prompt_lookup_max_ngram: int = _DEFAULTS["prompt_lookup_max_ngram"]
    response_cache: bool = _DEFAULTS["response_cache"]
    response_cache_size: int = _DEFAULTS["response_cache_size"]
    stop_token_ids: tuple[int, ...] = (2,)


@dataclass
class EngineCounters:
    """Running totals for ``/server_info`` ``internal_states`` (never part of the launch config)."""

    requests_admitted: int = 0
    requests_completed: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0
    tokens_generated: int = 0
    prefill_batches: int = 0
    decode_steps: int = 0
    max_running_batch: int = 0
    spec_verify_steps: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_produced: int = 0
    response_cache_hits: int = 0
    response_cache_misses: int = 0
    step_errors: int = 0


class Engine:
    """Owns the model; runs the scheduler thread."""

    def __init__(
        self,
        model: Any,
        options: EngineOptions,
        on_step_error: Callable[[BaseException], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ):
        self.model = model
        self.options = options
        self.counters = EngineCounters()
        self._queue: queue.Queue[GenRequest] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._batch: Batch | None = None
        self._response_cache: OrderedDict[str, tuple[list[int], FinishReason, str]] = OrderedDict()
        self._on_step_error = on_step_error
        self._on_fatal = on_fatal
        self.fatal: BaseException | None = None
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device

    # -- lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="perfwarden-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.fatal is None

    def submit(self, req: GenRequest) -> None:
        """Thread-safe: queue a request for the scheduler."""
        if not self.alive:
            raise RuntimeError("the scheduler is not running")
        self._queue.put(req)

    def internal_state(self) -> dict[str, Any]:
        """A snapshot for ``/server_info`` (read from the HTTP thread while the scheduler runs)."""
        c = self.counters
        batch = self._batch  # read once: the scheduler may replace it concurrently
        state = dict(vars(c))
        state["avg_spec_accept_length"] = (
            c.spec_produced / c.spec_verify_steps if self.options.prompt_lookup and c.spec_verify_steps else None
        )
        state["response_cache_entries"] = len(self._response_cache) if self.options.response_cache else None
        state["running_batch"] = len(batch.reqs) if batch is not None else 0
        state["queued"] = self._queue.qsize()
        return state

    # -- the loop

    def _run(self) -> None:
        try:
            with torch.inference_mode():
                while not self._stop.is_set():
                    self._admit()
                    if self._batch is not None:
                        self._decode_step()
        except BaseException as exc:  # our own bug: fail loudly, never hang clients
            self.fatal = exc
            log.critical("FATAL scheduler crashed: %s\n%s", exc, traceback.format_exc())
            for req in self._drain_all():
                req.emit(ErrorEvent(f"server scheduler crashed: {type(exc).__name__}: {exc}", "scheduler_crash"))
            if self._on_fatal is not None:
                self._on_fatal(exc)

    def _drain_all(self) -> list[GenRequest]:
        reqs = list(self._batch.reqs) if self._batch is not None else []
        self._batch = None
        while True:
            try:
                reqs.append(self._queue.get_nowait())
            except queue.Empty:
                return reqs

    def _collect(self) -> list[GenRequest]:
        """New requests to admit: wait for a batch to fill when idle, take what is queued when busy."""
        opts = self.options
        running = len(self._batch.reqs) if self._batch is not None else 0
        free = opts.max_batch_size - running
        if free <= 0:
            return []
        got: list[GenRequest] = []
        if running == 0:
            try:
                got.append(self._queue.get(timeout=0.05))
            except queue.Empty:
                return []
            deadline = time.monotonic() + opts.batch_wait_ms / 1000.0
            while len(got) < free:
                remaining = deadline - time.monotonic()
                try:
                    got.append(self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait())
                except queue.Empty:
                    break
        else:
            while len(got) < free:
                try:
                    got.append(self._queue.get_nowait())
                except queue.Empty:
                    break
        return got

    def _admit(self) -> None:
        new = []
        for req in self._collect():
            if req.cancelled:
                self._finish_cancelled(req)
            elif self.options.response_cache and self._serve_from_cache(req):
                continue
            else:
                new.append(req)
        if not new:
            return
        try:
            prefilled = self._prefill(new)
        except Exception as exc:
            self._fail(new, exc, "prefill")
            return
        self.counters.requests_admitted += len(new)
        self._batch = prefilled if self._batch is None else merge_batches(self._batch, prefilled)
        self.counters.max_running_batch = max(self.counters.max_running_batch, len(self._batch.reqs))
        self._retire_finished()

    # -- response cache (the cheat the caching audit must catch; off by default)

    def _serve_from_cache(self, req: GenRequest) -> bool:
        key = req.cache_key()
        hit = self._response_cache.get(key)
        if hit is None:
            self.counters.response_cache_misses += 1
            return False
        ids, reason, source_rid = hit
        self._response_cache.move_to_end(key)
        self.counters.response_cache_hits += 1
        log.warning(
            "response_cache HIT rid=%s key=%s tokens=%d stored_from=%s (no model computation)",
            req.rid, key[:16], len(ids), source_rid,
        )
        req.generated = list(ids)
        if ids:
            req.emit(TokenEvent(list(ids)))
        # Admitted and completed like any request the engine answers: the totals must still say every
        # request that reached the engine (a witness of the client's count) and never more finished than admitted.
        self.counters.requests_admitted += 1
        self.counters.requests_completed += 1
        req.emit(DoneEvent(reason, self._usage(req, cached=True)))
        return True

    def _remember(self, req: GenRequest, reason: FinishReason) -> None:
        if not self.options.response_cache:
            return
        key = req.cache_key()
        self._response_cache[key] = (list(req.generated), reason, req.rid)
        self._response_cache.move_to_end(key)
        while len(self._response_cache) > self.options.response_cache_size:
            self._response_cache.popitem(last=False)
        log.info("response_cache STORE rid=%s key=%s tokens=%d", req.rid, key[:16], len(req.generated))

    # -- model calls

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor, cache: DynamicCache,
                 logits_to_keep: int) -> torch.Tensor:
        """Logits of the kept positions, on the host (one copy per step; sampling runs there)."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask.long(),
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
        )
        logits: torch.Tensor = out.logits
        return logits if logits.device.type == "cpu" else logits.float().cpu()

    def _prefill(self, reqs: list[GenRequest]) -> Batch:
        from transformers import DynamicCache

        for req in reqs:
            if req.params.temperature > 0.0:
                req.generator = torch.Generator()
                req.generator.manual_seed(req.params.seed if req.params.seed is not None else int.from_bytes(os.urandom(6), "little"))
        width = max(len(r.prompt_ids) for r in reqs)
        ids = torch.zeros((len(reqs), width), dtype=torch.long)
        mask = torch.zeros((len(reqs), width), dtype=torch.bool)
        for i, r in enumerate(reqs):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[i, width - len(r.prompt_ids) :] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self._forward(ids, mask, positions, cache, logits_to_keep=1)[:, -1, :]
        self.counters.prefill_batches += 1
        first = [choose_token(_constrained(r, logits[i]), r.params, r.generator) for i, r in enumerate(reqs)]
        batch = Batch(
            reqs=list(reqs),
            cache=cache,
            mask=mask,
            next_pos=mask.sum(-1).long(),
            last_token=torch.tensor(first, dtype=torch.long),
        )
        now = time.monotonic()
        for r, tok in zip(reqs, first, strict=True):
            r.first_token_at = now
            self._append(r, [tok])
        return batch

    def _decode_step(self) -> None:
        batch = self._batch
        assert batch is not None
        live = [i for i, r in enumerate(batch.reqs) if not r.cancelled]
        if len(live) < len(batch.reqs):
            for r in batch.reqs:
                if r.cancelled:
                    self._finish_cancelled(r)
            if not live:
                self._batch = None
                return
            batch = self._batch = select_rows(batch, live)
        drafts = self._drafts(batch) if self.options.prompt_lookup else [[] for _ in batch.reqs]
        q_len = 1 + max(len(d) for d in drafts)
        B = len(batch.reqs)
        step_ids = torch.zeros((B, q_len), dtype=torch.long)
        step_mask = torch.zeros((B, q_len), dtype=torch.bool)
        for i, d in enumerate(drafts):
            row = [int(batch.last_token[i])] + d
            step_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            step_mask[i, : len(row)] = True
        step_ids, step_mask = step_ids.to(self.device), step_mask.to(self.device)
        positions = batch.next_pos[:, None] + torch.arange(q_len, device=self.device)[None, :]
        full_mask = torch.cat([batch.mask, step_mask], dim=1)
        try:
            logits = self._forward(step_ids, full_mask, positions, batch.cache, logits_to_keep=q_len)
        except Exception as exc:
            self._batch = None
            self._fail(batch.reqs, exc, "decode")
            return
        self.counters.decode_steps += 1
        new_last = []
        committed = torch.zeros((B, q_len), dtype=torch.bool)
        for i, (req, d) in enumerate(zip(batch.reqs, drafts, strict=True)):
            accepted, nxt = verify_draft(_constrained(req, logits[i]), d, req.params, req.generator)
            committed[i, : 1 + accepted] = True  # the fed token and the accepted drafts are now in the cache
            produced = d[:accepted] + [nxt]
            if self.options.prompt_lookup:
                req.spec.verify_steps += 1
                req.spec.drafted += len(d)
                req.spec.accepted += accepted
                req.spec.produced += len(produced)
                self.counters.spec_verify_steps += 1
                self.counters.spec_drafted += len(d)
                self.counters.spec_accepted += accepted
                self.counters.spec_produced += len(produced)
            self._append(req, produced)
            new_last.append(nxt)
        committed = committed.to(self.device)
        batch.mask = torch.cat([batch.mask, committed], dim=1)
        batch.next_pos = batch.next_pos + committed.sum(-1)
        batch.last_token = torch.tensor(new_last, dtype=torch.long)
        self._retire_finished()

    def _drafts(self, batch: Batch) -> list[list[int]]:
        opts = self.options
        out: list[list[int]] = []
        for req in batch.reqs:
            room = req.params.max_tokens - len(req.generated) - 1
            if room <= 0 or req.constraint is not None:  # a draft would bypass the grammar's mask
                out.append([])
                continue
            history = req.prompt_ids + req.generated
            out.append(prompt_lookup_draft(history, min(opts.prompt_lookup_num_tokens, room), opts.prompt_lookup_max_ngram))
        return out

    # -- bookkeeping

    def _append(self, req: GenRequest, tokens: list[int]) -> None:
        """Add produced tokens to a request, stopping at EOS or ``max_tokens``, and stream them."""
        out: list[int] = []
        for tok in tokens:
            if len(req.generated) >= req.params.max_tokens or req.finish is not None:
                break
            if tok in self.options.stop_token_ids and not req.params.ignore_eos:
                req.finish = "stop"
                break
            req.generated.append(tok)
            out.append(tok)
            if req.constraint is not None and (not req.constraint.advance(tok) or req.constraint.complete):
                req.finish = "stop"  # the answer matches the grammar whole (a refused token cannot follow a mask)
                break
        if len(req.generated) >= req.params.max_tokens and req.finish is None:
            req.finish = "length"
        self.counters.tokens_generated += len(out)
        if out:
            req.emit(TokenEvent(out))

    def _retire_finished(self) -> None:
        batch = self._batch
        if batch is None:
            return
        keep = []
        for i, req in enumerate(batch.reqs):
            reason = req.finish
            if reason is None:
                keep.append(i)
                continue
            self._remember(req, reason)
            self.counters.requests_completed += 1
            usage = self._usage(req)
            if self.options.prompt_lookup:
                log.info(
                    "prompt_lookup rid=%s verify_steps=%d drafted=%d accepted=%d accept_length=%s",
                    req.rid, req.spec.verify_steps, req.spec.drafted, req.spec.accepted,
                    usage.get("spec_accept_length"),
                )
            req.emit(DoneEvent(reason, usage))
        if len(keep) == len(batch.reqs):
            return
        self._batch = select_rows(batch, keep) if keep else None

    def _usage(self, req: GenRequest, cached: bool = False) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": len(req.prompt_ids),
            "completion_tokens": len(req.generated),
            "total_tokens": len(req.prompt_ids) + len(req.generated),
        }
        if self.options.prompt_lookup and not cached:
            s = req.spec
            usage["spec_verify_ct"] = s.verify_steps
            usage["spec_draft_tokens"] = s.drafted
            usage["spec_accepted_tokens"] = s.accepted
            usage["spec_accept_length"] = round(s.produced / s.verify_steps, 4) if s.verify_steps else None
        return usage

    def _finish_cancelled(self, req: GenRequest) -> None:
        self.counters.requests_cancelled += 1
        log.info("request cancelled rid=%s after %d tokens (client went away)", req.rid, len(req.generated))
        req.emit(DoneEvent("cancelled", self._usage(req)))

    def _fail(self, reqs: list[GenRequest], exc: BaseException, phase: str) -> None:
        self.counters.step_errors += 1
        self.counters.requests_failed += len(reqs)
        log.error(
            "ERROR %s step failed for %d request(s) rids=%s: %s: %s\n%s",
            phase, len(reqs), [r.rid for r in reqs], type(exc).__name__, exc, traceback.format_exc(),
        )
        if self._on_step_error is not None:
            self._on_step_error(exc)
        for req in reqs:
            req.emit(ErrorEvent(f"{phase} failed: {type(exc).__name__}: {exc}", "internal_error"))
