"""A goodput SLO: the per-request latency limits a request must meet to count as good (DistServe's goodput,
as ``vllm bench serve --goodput`` and ``sglang.bench_serving --goodput`` define it).

One format, written the ways people write it: perfwarden's ``ttft_ms=500,tpot_ms=100`` (a claim, a
command line) and vLLM's own ``ttft:500 tpot:100`` (its ``--goodput`` arguments, and the ``goodput`` field
that ``vllm bench serve --metadata goodput=ttft:500,tpot:100`` records in a result file). Limits are in
milliseconds, as both tools take them. What counts as a good request is the auditor's arithmetic
(``auditor/goodput.py``), not this format's.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SLO_FIELDS = ("ttft_ms", "tpot_ms", "e2el_ms")
"""perfwarden's names of the three limits; vLLM's are the same without ``_ms``."""
MAX_SLO_MS = 1e9
"""A limit beyond ~11.6 days is no latency objective: refused as malformed."""
MAX_SLO_TEXT = 256
"""Longest SLO text parsed (a real one is a few dozen characters)."""
_PAIR = re.compile(r"^(ttft|tpot|e2el)(_ms)?\s*([:=])\s*([0-9][0-9_.eE+-]*)$")


class SloError(ValueError):
    """An SLO text or record that is not one: which part and why."""


_LIMIT = Field(default=None, ge=0, le=MAX_SLO_MS, allow_inf_nan=False)


class GoodputSlo(BaseModel):
    """The latency limits of a goodput SLO, in milliseconds (at least one, each finite, in [0, 1e9]). A
    request is good when it meets every limit the SLO sets (``auditor/goodput.py``)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True, frozen=True)

    ttft_ms: float | None = _LIMIT
    """Longest time to first token, ms (vLLM's ``ttft``)."""
    tpot_ms: float | None = _LIMIT
    """Longest time per output token after the first, ms (vLLM's ``tpot``: (latency - TTFT) / (tokens - 1))."""
    e2el_ms: float | None = _LIMIT
    """Longest end-to-end latency, ms (vLLM's ``e2el``)."""

    @model_validator(mode="after")
    def _sets_a_limit(self) -> "GoodputSlo":
        if not self.limits():
            raise ValueError("a goodput SLO sets at least one of ttft_ms, tpot_ms, e2el_ms")
        return self

    def limits(self) -> dict[str, float]:
        """The limits this SLO sets, by perfwarden's name."""
        return {name: value for name in SLO_FIELDS if (value := getattr(self, name)) is not None}

    def text(self) -> str:
        """``ttft_ms=500,tpot_ms=100``: how perfwarden writes it (and reads it back)."""
        return ",".join(f"{name}={value:g}" for name, value in self.limits().items())


def parse_slo(text: str) -> GoodputSlo:
    """An SLO from ``ttft_ms=500,tpot_ms=100`` or vLLM's ``ttft:500 tpot:100`` (pairs separated by commas or
    spaces); ``SloError`` names the part that is not a limit, a name given twice or a value out of range."""
    if not isinstance(text, str) or len(text) > MAX_SLO_TEXT:
        raise SloError(f"a goodput SLO is text of at most {MAX_SLO_TEXT} characters")
    values: dict[str, float] = {}
    for part in (p for p in re.split(r"[,\s]+", text.strip()) if p):
        match = _PAIR.match(part)
        if match is None:
            raise SloError(f"goodput SLO part {part!r} is not ttft|tpot|e2el with a number of ms "
                           "(ttft_ms=500 or ttft:500)")
        name = f"{match.group(1)}_ms"
        if name in values:
            raise SloError(f"goodput SLO names {name} twice")
        try:
            values[name] = float(match.group(4))
        except ValueError:
            raise SloError(f"goodput SLO part {part!r}: {match.group(4)!r} is not a number") from None
    try:
        return GoodputSlo.model_validate(values)
    except ValidationError as exc:
        raise SloError(f"goodput SLO {text.strip()!r}: {exc.errors()[0]['msg']}") from None


SloSource = Literal["sealed", "recorded", "claim_witnessed", "claim"]


class GoodputBasis(BaseModel):
    """The SLO a verdict's goodput (``request_goodput``) was re-derived at from the per-request arrays, and
    what says it is the right one."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    slo: GoodputSlo
    """The SLO every rep's goodput was re-derived at."""
    source: SloSource
    """``sealed``: the run sealed it at its start (``objective.json``, ``formats/objective.py``), before any rep;
    ``recorded``: the bench lines record it (and each line's own ``request_goodput`` is this SLO's);
    ``claim_witnessed``: the claim states it, the lines record none, and each line's own
    ``request_goodput`` is reproduced at it; ``claim``: the claim states it and nothing in the lines
    witnesses it (a goodput headline is then refused)."""

    def describe(self) -> str:
        """One line for a person: the limits and where they come from."""
        limits = ", ".join(f"{name.removesuffix('_ms')} <= {value:g} ms" for name, value in self.slo.limits().items())
        where = {"sealed": "the SLO the run sealed at its start",
                 "recorded": "the SLO the bench files record",
                 "claim_witnessed": "the claim's SLO, which reproduces the files' own request_goodput",
                 "claim": "the claim's SLO; the files record none"}[self.source]
        return f"goodput re-derived from the per-request arrays at {limits} ({where})"
