"""``perfwarden redteam [FIXTURES…] [--rounds N] [--llm MODEL] [--json]``: attack the auditor.

Generates attacks (every registered family on every clean base, plus random pairs, per round), audits
each blind, and writes every success -- a fake win that PASSes, a FAIL-worthy fault that only FLAGs, an
honest win that is refused, a crash or resource blow-up -- into ``proof/fixtures/redteam-*`` (or
``--out``) with the attack's own answer key. Exit 0 when the auditor held, 1 when any attack succeeded,
3 for unusable input.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfwarden.orchestrator.paths import default_fixture_roots


def redteam(
    fixtures: list[Path] = typer.Argument(None, help="Clean fixtures to attack (one patch claim each; default: the "
                                          "shipped clean synthetic, transcribed and recorded runs)."),
    rounds: int = typer.Option(1, "--rounds", min=1, max=1000, help="Rounds: each applies every family to every base "
                               "and as many random pairs, at new sizes."),
    llm: str | None = typer.Option(None, "--llm", help="Also let an LLM (OpenAI-compatible endpoint: OPENAI_BASE_URL, "
                                   "OPENAI_API_KEY) invent one attack per base per round from the auditor's docs."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    out: Path | None = typer.Option(None, "--out", help="Where successes become fixtures (default: the shipped "
                                    "proof/fixtures)."),
    families: str | None = typer.Option(None, "--families", help="Comma-separated family names (default: all)."),
    seed: int = typer.Option(0, "--seed", help="Seed of sizes and pairings (same seed, same attacks)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Ray address (`local` starts Ray here): run the "
                                       "attacks on its nodes, one task each (the same results)."),
    explore: int | None = typer.Option(None, "--explore", min=0, max=1_000_000, help="Distinct edits for the field "
                                       "explorer (every field of every evidence record type; 0: skip it; default "
                                       "10,000, or 0 with --families)."),
    explore_workers: int = typer.Option(2, "--explore-workers", min=1, max=64, help="Processes for the explorers."),
    forge: int | None = typer.Option(None, "--forge", min=0, max=1_000_000, help="Distinct coherent forgeries for the "
                                     "forgery explorer (a measurement moved with some of its witnesses, a condition "
                                     "or identity restated, records moved, a leg downgraded; 0: skip it; default "
                                     "10,000, or 0 with --families)."),
    op_catalogue: bool | None = typer.Option(None, "--op-catalogue/--no-op-catalogue", help="Also run the op-level "
                                             "exploit catalogue through the op bench as candidates (default: on, off "
                                             "with --families)."),
) -> None:
    """Attack the auditor; exit 1 when any attack succeeds."""
    from perfwarden.redteam import red_team  # lazy: numpy, pydantic, the auditor: only for this command

    err = Console(stderr=True, soft_wrap=True, highlight=False)
    root = default_fixture_roots()[0]
    bases = list(fixtures) if fixtures else [root / name for name in red_team.DEFAULT_BASES]
    missing = [str(b) for b in bases if not (Path(b) / "run" / "claims").is_dir()]
    if missing:
        err.print(Text.assemble(("error: ", "red"), f"not fixtures (no run/claims): {missing!r}"))
        raise typer.Exit(3)
    only = [f.strip() for f in families.split(",") if f.strip()] if families else None
    try:
        report = red_team.redteam(bases, rounds=rounds, seed=seed, out=out or root, only=only,
                                  fan_out=_cluster_map(cluster) if cluster is not None else None)
    except ValueError as exc:  # an unknown family, or a cluster that cannot be joined
        err.print(Text.assemble(("error: ", "red"), str(exc)))
        raise typer.Exit(3) from None
    if llm:
        from perfwarden.harness.llm_client import LLMClient, LLMUnavailable  # lazy: openai: only with --llm

        brain = red_team.LLMRedTeam(LLMClient(model=llm))
        usable = [b for b in (red_team.load_base(Path(f)) for f in bases) if b is not None and b.name in report.bases]
        with tempfile.TemporaryDirectory(prefix="pw-redteam-llm-") as tmp:
            for rnd in range(rounds):
                try:
                    report.results += red_team.llm_round(brain, usable, Path(tmp), out or root, f"llm:{seed}:{rnd}")
                except LLMUnavailable as exc:
                    err.print(Text.assemble(("warning: ", "yellow"), f"LLM brain unavailable: {exc}"))
                    break
    data = report.to_json()
    data.update(_explore_and_ops(EXPLORE_EDITS if explore is None and not only else explore or 0, explore_workers,
                                 op_catalogue if op_catalogue is not None else not only, seed, out or root))
    data.update(_forge(FORGERIES if forge is None and not only else forge or 0, explore_workers, out or root))
    failed = bool(report.successes) or any(data[k]["successes"] for k in ("explorer", "op_catalogue", "forgeries")
                                           if data.get(k))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        print_report(data, Console())
    raise typer.Exit(1 if failed else 0)


EXPLORE_EDITS = 10_000
"""The field explorer's default budget of distinct edits."""


FORGERIES = 10_000
"""The coherent-forgery explorer's default budget of distinct forgeries."""


def _forge(forgeries: int, workers: int, out: Path) -> dict:
    """The coherent-forgery explorer's report, under its own key."""
    if not forgeries:
        return {}
    from perfwarden.verify import forgery_run

    root = default_fixture_roots()[0]
    fixtures = [root / name for name in forgery_run.FORGERY_BASES]
    return {"forgeries": forgery_run.explore(fixtures, forgeries=forgeries, workers=workers, out=out).to_json()}


def _explore_and_ops(edits: int, workers: int, ops: bool, seed: int, out: Path) -> dict:
    """The field explorer's and the op catalogue's reports, each under its own key."""
    from perfwarden.verify import field_explorer, field_explorer_run

    data: dict = {}
    if edits:
        root = default_fixture_roots()[0]
        fixtures = [root / name for name in field_explorer.EXPLORER_BASES]
        data["explorer"] = field_explorer_run.explore(fixtures, edits=edits, workers=workers, seed=seed,
                                                      out=out).to_json()
    if ops:
        from perfwarden.verify.op_candidates import op_bench_candidates

        data["op_catalogue"] = op_bench_candidates()
    return data


def _cluster_map(address: str):
    """Map attacks over the Ray cluster at ``address`` (Ray is imported only here)."""
    from perfwarden.orchestrator import ray_env

    ray_env.prepare(address)  # before Ray is imported: it reads its environment then
    from perfwarden.orchestrator import cluster

    def fan_out(fn, jobs):
        try:
            return cluster.fan_out(fn, jobs, address)
        except cluster.ClusterError as exc:
            raise ValueError(str(exc)) from None
    return fan_out


def print_report(data: dict, console: Console) -> None:
    table = Table(title="attack families", pad_edge=False)
    for col in ("family", "attacks", "successes"):
        table.add_column(col)
    for name, row in sorted(data["per_family"].items()):
        table.add_row(name, str(row["attacks"]), str(row["successes"]) if not row["successes"] else
                      f"[red]{row['successes']}[/red]")
    console.print(table)
    for s in data["success_list"][:50]:
        console.print(Text.assemble(("success ", "red"), f"{s['family']} on {s['base']}: {s['why']} -> {s['fixture']}"))
    for base, why in data["skipped_bases"].items():
        console.print(Text(f"skipped base {base}: {why}", style="yellow"))
    console.print(f"{data['families']} families, {data['attacks']} attacks on {len(data['bases'])} bases, "
                  f"{data['successes']} successes in {data['seconds']}s ({data['attacks_per_second']} attacks/s)")
    if data.get("explorer"):
        ex = data["explorer"]
        for kind, row in sorted(ex["success_classes"].items()):
            console.print(Text.assemble(("explorer success ", "red"), f"{kind} x{row['count']}: {row['example']} "
                                        f"({row['verdict']}) -> {row['fixture']}"))
        console.print(f"field explorer: {ex['edits']} distinct edits over {len(ex['record_types'])} record types, "
                      f"{ex['audited']} audited (changed what the auditor judges), {ex['successes']} successes "
                      f"in {ex['seconds']}s")
    if data.get("op_catalogue"):
        ops = data["op_catalogue"]
        for s in ops["success_list"]:
            console.print(Text.assemble(("op-bench success ", "red"), f"{s['candidate']} ({s['op']}): {s['why']}"))
        console.print(f"op catalogue: the op bench refused {ops['refused']} of {ops['exploits']} exploits, "
                      f"{ops['honest_refused']} of {ops['honest']} honest alternatives ({ops['seconds']}s)")
    if data.get("forgeries"):
        fo = data["forgeries"]
        for kind, row in sorted(fo["success_classes"].items()):
            console.print(Text.assemble(("forgery success ", "red"), f"{kind} x{row['count']}: {row['example']} "
                                        f"({row['verdict']}: {row['why']}) -> {row['fixture']}"))
        console.print(f"forgery explorer: {fo['forgeries']} distinct coherent forgeries over "
                      f"{len(fo['record_types'])} record types, {fo['audited']} audited, {fo['consistent']} consistent "
                      f"(every witness moved), {fo['successes']} successes in {fo['seconds']}s")
