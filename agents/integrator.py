"""integrator: builds overlays, runs interleaved A/B legs, submits patch and bundle claims.

It states what it believes (lever class, headline kind, mechanism) and the conditions it thinks both
legs ran with; the auditor checks all of it against the raw.
"""

from __future__ import annotations

from typing import Any

from perfwarden.agents.base import Proposal

INERT_FOR_LEG_NAMES = ("=", " ", "/", ":")


def overlay_of(proposal: Proposal) -> dict[str, Any]:
    """Config diff and kernel patches of one proposal (the leg's overlay)."""
    if proposal.kind == "kernel":
        return {"config": {}, "kernel_patches": [{"op": proposal.op, "impl": proposal.chosen}]}
    return {"config": dict(proposal.config), "kernel_patches": []}


def candidate_config(base: dict[str, Any], proposal: Proposal) -> dict[str, Any]:
    config = dict(base)
    if proposal.kind == "kernel":
        overrides = dict(config.get("op_overrides") or {})
        overrides[proposal.op] = proposal.chosen
        config["op_overrides"] = overrides
    else:
        config.update(proposal.config)
    return config


def leg_names(proposal: Proposal, attempt: int) -> tuple[str, str]:
    safe = proposal.id
    for ch in INERT_FOR_LEG_NAMES:
        safe = safe.replace(ch, "-")
    return f"{safe}-a{attempt}-base", f"{safe}-a{attempt}-cand"


def patch_claim(proposal: Proposal, seq: int, base_leg: str, cand_leg: str, opbench_rel: str | None,
                aa_legs: list[str] | None = None) -> dict:
    """The claim as the producer would write it (its beliefs, not the auditor's). ``aa_legs``: the run's
    same-config legs (baseline and its A/A twin) that calibrate the noise band."""
    keys = sorted(proposal.config) if proposal.kind == "config" else []
    claim: dict[str, Any] = {
        "seq": seq, "scope": "patch", "producer": proposal.producer,
        "legs": {"baseline": base_leg, "candidate": cand_leg, "aa": list(aa_legs or [])},
        "lever": {"name": proposal.id, "lever_class": proposal.believed_class, "config_keys": keys,
                  "kernel_ops": [proposal.op] if proposal.kind == "kernel" else []},
        "headline": {"metric": "output_throughput", "kind": proposal.headline_kind,
                     "disclosed_regressions": proposal.disclosed_regressions},
        "correctness": {"parity": "exact_text", "quality_eval_id": proposal.quality_eval_id},
        "mechanism": {"name": proposal.mechanism, "variant": proposal.mechanism_variant, "support": proposal.support,
                      "draft_model_id": proposal.draft_model_id, "acceptance_rate": proposal.acceptance_rate},
    }
    if proposal.kind == "kernel" and proposal.isolated_speedup:
        claim["isolated_speedup"] = {"value": proposal.isolated_speedup, "op": proposal.op, "opbench": opbench_rel,
                                     "baseline_backend": "reference", "candidate_backend": proposal.chosen}
    return claim


def bundle_claim(banked: list[dict[str, Any]], seq: int, base_leg: str, bundle_leg: str,
                 caching_leg: str | None) -> dict:
    keys = sorted({k for b in banked for k in b.get("config_keys", [])})
    ops = sorted({b["op"] for b in banked if b.get("op")})
    classes = {b["lever_class"] for b in banked}
    spec = next((b["mechanism"] for b in banked
                 if (b.get("mechanism") or {}).get("name") == "speculative_decoding"), None)
    return {"seq": seq, "scope": "bundle", "producer": "integrator",
            "legs": {"baseline": base_leg, "candidate": bundle_leg, "validation": bundle_leg,
                     "caching_audit": caching_leg, "caching_control": f"{caching_leg}-control" if caching_leg else None},
            "lever": {"name": "bundle", "lever_class": "B" if "B" in classes else "A", "config_keys": keys,
                      "kernel_ops": ops, "components": [b["name"] for b in banked]},
            "headline": {"metric": "output_throughput", "kind": "e2e"},
            "correctness": {"parity": "exact_text"},
            "mechanism": spec or {"name": "baseline"}}
