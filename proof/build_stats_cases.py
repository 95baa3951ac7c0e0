"""Fixtures for "a producer's choices only make the statistics more conservative".

Each case is a clean A/B run (``orchestrator.synth.build_ab_run``: a declared class-B knob, interleaved reps,
coherent identical outputs) plus legs measured with the baseline's configuration, and its answer is in
the ``CASES`` table, written from the rule before the auditor was changed:

- a declared A/A leg can widen the noise band, never narrow it below what the baseline's own reps show
  (``sta-aa-narrows-band``: a quiet A/A leg pooled with a noisy baseline made a 3.1% win clear a band
  the baseline's own 7 reps put at 3.35%);
- every leg of the run measured with the baseline's configuration and load is A/A evidence whether the
  claim cites it or not (``sta-undeclared-noisy-twin``: a quiet baseline, an uncited noisy twin);
- the claim's baseline must be representative of all same-config legs: a baseline significantly slower
  than the other same-config legs is a handicapped baseline (UNREPRESENTATIVE_BASELINE). The win is
  re-derived against every same-config rep: gone -> FAIL, eject; still significant -> FLAG,
  downgrade_headline (bank the re-derived size, not the claimed one).

Near misses that must PASS: a real A/A leg noisier than the baseline (it widens the band; the win
clears it), unequal rep counts (5 baseline and candidate, 3 A/A), a baseline slower than its twin by
less than the noise.

The number banked is the conservative one: ``sta-replay-*`` replay the ``max_num_seqs=4``
step of a ``--target vllm`` run whose baseline was 22% slower than its same-config twin (+73.1% against the
baseline, +41.9% against the twin). The verdict banks and shows the less favourable figure, and one finding
never masks another's action: a latency regression undisclosed beside the handicapped baseline keeps its
ask for a disclosure (the verdict does not bank), also when the handicap hides it (a baseline slow in its
latencies too, so the candidate matches it and is worse than the twin); disclosed at its size, the step
banks the twin figure. These answers say what is banked (``banks``) and at what size (``headline_rederived``).

Every rep of every leg gets its own 4 s slot (legs interleaved, no two reps overlapping in time).

    python -m perfwarden.proof.build_stats_cases [--out proof/fixtures]
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfwarden.orchestrator.synth import (BASE_INFO, REP_LATENCY_JITTER, ExtraLeg, build_ab_run, fixture_builder_main,
                                           make_rep, write_fixture)

SLOT_S = 4.0
"""Seconds between consecutive rep starts (a rep of 256 tokens at >= 70 tok/s lasts < 3.7 s)."""


@dataclass(frozen=True)
class Case:
    legs: dict[str, list[float]]
    """Leg -> per-rep output throughputs; ``base`` and ``cand`` are the claim's legs, the others run the
    baseline's configuration."""
    declared_aa: tuple[str, ...]
    headline: float
    """The delta the claim states: the raw's own, so only the rule under test can refuse it."""
    verdict: str | list[str]
    action: str | list[str] | None
    why: str
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    tpot: dict[str, float] = field(default_factory=dict)
    """Leg -> factor on its TPOT (every latency after the first token); 1 for a leg not named."""
    disclose: tuple[str, ...] = ()
    """Latency metrics the claim discloses, at the size the producer's own reading of its two legs gives."""
    banks: bool | None = None
    banked_headline: tuple[float, float] | None = None
    """The answer's ``banks`` and ``headline_rederived`` (None: not scored)."""
    frozen: str = "2026-11-26"


def schedule(legs: dict[str, list[float]], tpot: dict[str, float] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Reps interleaved round-robin over the legs, one ``SLOT_S`` slot each, in leg order."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in legs}
    slot = 0
    for k in range(max(len(v) for v in legs.values())):
        for name, values in legs.items():
            if k >= len(values):
                continue
            j = 1.0 + REP_LATENCY_JITTER[k % len(REP_LATENCY_JITTER)]
            out[name].append(make_rep(name, k, throughput=values[k], ttft_ms=100.0 * j,
                                      tpot_ms=20.0 * j * (tpot or {}).get(name, 1.0),
                                      started_at=1_000.0 + SLOT_S * slot))
            slot += 1
    return out


def build(case: Case) -> Callable[[Path], Any]:
    def _build(run: Path) -> Path:
        reps = schedule(case.legs, case.tpot)
        extra: dict[str, ExtraLeg] = {name: ("aa" if name in case.declared_aa else "baseline", BASE_INFO, reps[name])
                                      for name in case.legs if name not in ("base", "cand")}
        disclosed = own_disclosure(reps["base"], reps["cand"], case.disclose)
        headline: dict[str, Any] = {"metric": "output_throughput", "value": case.headline, "kind": "e2e"}
        claim: dict[str, Any] = {"legs": {"baseline": "base", "candidate": "cand", "aa": list(case.declared_aa)},
                                 "headline": {**headline, "disclosed_regressions": disclosed} if disclosed else headline}
        return build_ab_run(run, base_reps=reps["base"], cand_reps=reps["cand"], extra_legs=extra, claim=claim)
    return _build


def own_disclosure(base: list[dict[str, Any]], cand: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, float]:
    """What a producer discloses from its own two legs: each metric's change of the rep medians of the
    lines' own aggregates, in percent (worse is positive for these lower-is-better latencies)."""
    out = {}
    for metric in metrics:
        b = statistics.median(line[metric] for line in base)
        c = statistics.median(line[metric] for line in cand)
        out[metric] = round((c / b - 1.0) * 100.0, 2)
    return out


REPLAY_TWIN = [100.0, 100.7, 99.6]
REPLAY_BASE = [82.0, 82.5, 81.6]
"""22% slower than the twin: the twin's median is 1.22x the baseline's (100.0 / 82.0)."""
REPLAY_CAND = [141.9, 142.6, 141.3]
"""+73.1% over the baseline's median (141.9 / 82.0), +41.9% over the twin's (141.9 / 100.0)."""
REPLAY_LEGS = {"base": REPLAY_BASE, "cand": REPLAY_CAND, "twin": REPLAY_TWIN}
REPLAY_TWIN_FIGURE = (40.4, 43.4)
"""The twin figure, +41.9%, give or take 1.5 points for how the reps are pooled; never the +73.1%."""
LATENCY_METRICS = ("median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms",
                   "p99_e2e_latency_ms")
"""The latencies a TPOT regression moves (each is disclosed in the near miss)."""

QUIET = [100.0, 100.6, 99.5, 100.3, 99.8]
WIN = [110.3, 109.6, 111.0, 110.1, 109.2]

CASES: dict[str, Case] = {
    # ---- attacks
    "sta-aa-narrows-band": Case(
        {"base": [100.0, 102.5, 97.6, 101.9, 98.1, 102.9, 97.2],
         "cand": [103.1, 103.15, 103.05, 103.2, 103.0, 103.12, 103.08],
         "aa": [100.02, 99.98, 100.01, 99.99, 100.0, 100.03, 99.97]}, ("aa",), 3.1,
        "FAIL", ["eject", "remeasure"],
        "The baseline's own 7 reps (CV ~2.3%) put the noise band for 7 vs 7 reps at ~3.35%; the +3.1% win is "
        "inside it. A declared A/A leg of 7 near-identical reps pooled in would narrow the band to ~2.4% and make "
        "the win 'significant': an A/A leg may widen the band, never narrow it below the baseline's own.",
        include=["DELTA_NOT_SIGNIFICANT"]),
    "sta-undeclared-noisy-twin": Case(
        {"base": [100.0, 100.1, 99.9, 100.05, 99.95], "cand": [103.0, 103.1, 102.9, 103.05, 102.95],
         "twin": [97.0, 103.0, 99.0, 104.0, 96.5]}, (), 3.0,
        "FAIL", ["eject", "remeasure"],
        "A second leg measured with the baseline's configuration and load, not cited by the claim, varies by "
        "7.5% rep to rep: the session's noise is far wider than the quiet baseline shows, and a +3% win is "
        "inside it. Every same-config leg is A/A evidence whether the claim cites it or not.",
        include=["DELTA_NOT_SIGNIFICANT"]),
    "sta-handicapped-baseline": Case(
        {"base": [92.0, 92.5, 91.6, 92.3, 91.8], "cand": [100.3, 100.8, 99.9, 100.6, 100.1],
         "base-b": [100.2, 100.7, 99.8, 100.4, 99.9], "base-c": [100.5, 100.9, 100.1, 100.6, 100.2]}, (), 9.13,
        "FAIL", "eject",
        "Three legs ran the baseline's configuration; the claim's baseline is the slowest by 8%, far outside the "
        "noise. Against the other same-config legs the candidate's +9.1% is nothing (its reps straddle theirs): "
        "the win is the baseline's handicap.",
        include=["UNREPRESENTATIVE_BASELINE"]),
    "sta-handicapped-baseline-still-wins": Case(
        {"base": [95.0, 95.4, 94.6, 95.2, 94.8], "cand": [110.5, 111.0, 110.1, 110.7, 110.3],
         "base-b": [100.2, 100.7, 99.8, 100.4, 99.9], "base-c": [100.5, 100.9, 100.1, 100.6, 100.2]}, (), 16.32,
        "FLAG", "downgrade_headline",
        "The claim's baseline is the slowest of three same-config legs by 5%; the candidate still beats every "
        "same-config rep by ~10% (significant), so the win is real but the claimed +16% is measured against a "
        "handicapped baseline: bank the re-derived size only.",
        include=["UNREPRESENTATIVE_BASELINE"]),
    # ---- near misses
    "sta-aa-widens-band": Case(
        {"base": QUIET, "cand": WIN, "aa": [98.5, 101.5, 100.4, 99.2, 101.0]}, ("aa",), 10.1,
        "PASS", "pass",
        "A real A/A leg, noisier than the baseline (3% spread): the band widens to ~1.7%, the +10% win clears "
        "it; the A/A leg's median equals the baseline's.",
        exclude=["DELTA_NOT_SIGNIFICANT", "UNREPRESENTATIVE_BASELINE", "NOISY_BASELINE"]),
    "sta-aa-unequal-reps": Case(
        {"base": QUIET, "cand": WIN, "aa": [100.5, 99.4, 100.1]}, ("aa",), 10.1,
        "PASS", "pass",
        "5 baseline and candidate reps, 3 A/A reps: unequal counts are honest (the band is computed for the "
        "compared legs' own counts); the +10% win clears it.",
        exclude=["DELTA_NOT_SIGNIFICANT", "UNREPRESENTATIVE_BASELINE"]),
    "sta-twin-slower-within-noise": Case(
        {"base": [99.6, 100.1, 99.2, 99.9, 99.4], "cand": WIN, "twin": [100.2, 100.7, 99.8, 100.4, 99.9]}, (), 10.54,
        "PASS", "pass",
        "The baseline is slower than its uncited same-config twin by 0.5%, inside the noise: that is chance, not "
        "a handicap; the +10% win is real.",
        exclude=["DELTA_NOT_SIGNIFICANT", "UNREPRESENTATIVE_BASELINE"]),
    # ---- the number banked is the conservative one; one finding never masks another's action
    "sta-replay-handicapped-baseline": Case(
        REPLAY_LEGS, (), 73.1,
        "FLAG", "downgrade_headline",
        "Replays a --target vllm step (max_num_seqs=4): its baseline ran 22% slower than a same-config twin of "
        "the same run; the candidate is +73.1% against that baseline and +41.9% against the twin. The win is real "
        "(it clears the twin by far), so the step banks -- at the less favourable figure, the twin's: banking "
        "+73.1% would credit the change with the baseline's handicap.",
        include=["UNREPRESENTATIVE_BASELINE"], exclude=["HIDDEN_LATENCY_REGRESSION"], banks=True,
        banked_headline=REPLAY_TWIN_FIGURE, frozen="2026-11-28"),
    "sta-replay-handicapped-baseline-hidden-latency": Case(
        REPLAY_LEGS, (), 73.1,
        "FLAG", ["downgrade_headline", "flag"],
        "The same step with the candidate's time per output token 9% worse, undisclosed (as the vLLM run's p99 "
        "TPOT +9.1% and median ITL +4.6% were). The handicapped baseline's downgrade_headline banks; the hidden "
        "latency regression asks for a disclosure, which banks nothing until it is made. One finding's action must "
        "not swallow another's: the verdict does not bank.",
        include=["UNREPRESENTATIVE_BASELINE", "HIDDEN_LATENCY_REGRESSION"], tpot={"cand": 1.09}, banks=False,
        banked_headline=REPLAY_TWIN_FIGURE, frozen="2026-11-28"),
    "sta-replay-handicapped-baseline-latency-disclosed": Case(
        REPLAY_LEGS, (), 73.1,
        "FLAG", "downgrade_headline",
        "Near miss: the same 9% TPOT trade-off, disclosed at the size the producer's own legs show. Nothing is "
        "hidden; the step banks at the twin figure.",
        include=["UNREPRESENTATIVE_BASELINE"], exclude=["HIDDEN_LATENCY_REGRESSION"], tpot={"cand": 1.09},
        disclose=LATENCY_METRICS, banks=True, banked_headline=REPLAY_TWIN_FIGURE, frozen="2026-11-28"),
    "sta-handicap-masks-latency": Case(
        REPLAY_LEGS, (), 73.1,
        "FLAG", ["downgrade_headline", "flag"],
        "The adversary's version: the baseline is handicapped in its latencies too (TPOT 10% over its twin's), and "
        "the candidate's TPOT matches the handicapped baseline's. Against its own baseline nothing regressed; "
        "against the same-config twin -- the level the baseline's configuration shows unhandicapped -- every "
        "token is 10% slower. A handicapped baseline must not hide a latency regression any more than it may "
        "inflate a win: the regression needs its disclosure, so the verdict does not bank.",
        include=["UNREPRESENTATIVE_BASELINE", "HIDDEN_LATENCY_REGRESSION"], tpot={"base": 1.10, "cand": 1.10},
        banks=False, banked_headline=REPLAY_TWIN_FIGURE, frozen="2026-11-28"),
    # ---- a significant regression is named as one; an undecided delta is not
    "sta-significant-regression": Case(
        {"base": QUIET, "cand": [72.0, 72.5, 71.6, 72.3, 71.8]}, (), -28.11,
        "FAIL", "eject",
        "The candidate is 28% slower in every rep (p far below 0.01, the band about 1%): the step is a clear "
        "regression, and the verdict names it so -- not 'not significant', which reads as undecided.",
        include=["DELTA_REGRESSION"], exclude=["DELTA_NOT_SIGNIFICANT"], banks=False, frozen="2026-11-28"),
    "sta-undecided-negative": Case(
        {"base": QUIET, "cand": [99.4, 100.5, 99.0, 100.2, 99.3]}, (), -0.3,
        "FAIL", ["eject", "remeasure"],
        "Near miss: the candidate is 0.3% slower, inside the noise: undecided, not a regression.",
        include=["DELTA_NOT_SIGNIFICANT"], exclude=["DELTA_REGRESSION"], banks=False, frozen="2026-11-28"),
}


def build_all(out: Path) -> list[str]:
    return [write_fixture(out, name, build(case), {"verdict": case.verdict, "action": case.action,
                                                   "must_include": case.include, "must_exclude": case.exclude,
                                                   **({"banks": case.banks} if case.banks is not None else {}),
                                                   **({"headline_rederived": list(case.banked_headline)}
                                                      if case.banked_headline is not None else {})},
                          frozen=case.frozen, claim_returned=True,
                          provenance="hand-built by proof/build_stats_cases.py (issue 17 §5: the producer's choices "
                                     "only make the statistics more conservative; synthetic raw)",
                          rationale=case.why)
            for name, case in CASES.items()]


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
