"""The coherent-forgery explorer's other families: statements, records, downgrades, and rep requests.

See ``forgery.py`` for what a coherent forgery is; the oracle's expectation of each is in its ``Expected``.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfwarden.auditor.model.schema import evidence_model
from perfwarden.verify import forgery_oracle as oracle
from perfwarden.verify.field_explorer_oracle import flat_keys
from perfwarden.verify.forgery import (BaseView, Edit, Forgery, _bench, _folder, _rep_subsets, _write_bench,
                                       moved_subsets, records_moved)
from perfwarden.verify.forgery_files import Line, edit_detail, edit_json, edit_summary, read_lines, rederive_aggregates
from perfwarden.verify.forgery_oracle import Expectation, Expected

REFUSE: Expectation = "refuse"


# -------------------------------------------------------------------------------------------- statements


def _flat(obj: Any) -> dict[str, Any]:
    return flat_keys(obj, leaf=lambda v: v)


def _set(obj: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        obj = obj[part]
    obj[parts[-1]] = value


def variants(value: Any) -> list[Any]:
    """Type-consistent other values of a stated value (none for a null or an empty object)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value * 2 + 3]
    if isinstance(value, float):
        return [value * 1.5 + 0.25, value + 1.0]
    if isinstance(value, str):
        return [value + "-x", (value.upper() if value.upper() != value else value + "2")]
    if isinstance(value, list):
        return [[*value, value[-1]] if value else [1]]
    return []


_EFFECTIVE = re.compile(r"(\beffective_config )(\{.*)$")
_LOADED = re.compile(r"(\bmodel loaded name=)('[^']*')( dir=)('[^']*')( digest=)(\S+)")
_SERVING = re.compile(r"(\bserving model=)('[^']*')")
LOG_PLACES = {"model": ("model_loaded:name", "serving:model"), "model_path": ("model_loaded:dir",),
              "weights_digest": ("model_loaded:digest",)}


def _places(base: BaseView, leg: str, key: str) -> list[str]:
    """Every place ``leg`` states ``key``: its server_info.json, each bench line's copy, the server log's
    configuration and model lines, its leg.json overlay."""
    out = ["server_info.json"]
    out += [f"bench:{i}" for i, line in enumerate(base.lines[leg]) if key in _flat(line.get("server_info"))]
    for raw in base.log[leg].splitlines():
        m = _EFFECTIVE.search(raw)
        if m and key in _flat(json.loads(m.group(2))):
            out.append("log:effective_config")
            break
    out += [p for p in LOG_PLACES.get(key, ()) if re.search(r"\bmodel loaded name=" if "loaded" in p
                                                           else r"\bserving model=", base.log[leg])]
    spec = json.loads((base.run / "legs" / leg / "leg.json").read_text("utf-8"))
    if key in _flat((spec.get("overlay") or {}).get("config")):
        out.append("overlay")
    return out


def _edit_place(run: Path, leg: str, key: str, value: Any, place: str) -> None:
    legdir = run / "legs" / leg
    if place == "server_info.json":
        edit_json(legdir / "server_info.json", lambda obj: _set(obj, key, value))
    elif place.startswith("bench:"):
        index = int(place.split(":")[1])
        lines = read_lines(_bench(run, leg))
        _set(lines[index]["server_info"], key, value)
        _write_bench(run, leg, lines)
    elif place == "overlay":
        edit_json(legdir / "leg.json", lambda obj: _set(obj["overlay"]["config"], key, value))
    else:
        log = legdir / "server.log"
        log.write_text("".join(_log_line(raw, key, value, place) for raw in
                               log.read_text("utf-8").splitlines(keepends=True)), encoding="utf-8")


def _log_line(raw: str, key: str, value: Any, place: str) -> str:
    if place == "log:effective_config":
        m = _EFFECTIVE.search(raw)
        if m:
            obj = json.loads(m.group(2))
            _set(obj, key, value)
            return raw[:m.start(2)] + json.dumps(obj, sort_keys=True) + ("\n" if raw.endswith("\n") else "")
        return raw
    kind, part = place.split(":", 1)
    if kind == "model_loaded":
        group = {"name": 2, "dir": 4, "digest": 6}[part]
        new = repr(value) if part != "digest" else str(value)
        return _LOADED.sub(lambda m: "".join(new if i == group else m.group(i) for i in range(1, 7)), raw)
    return _SERVING.sub(lambda m: m.group(1) + repr(value), raw)


def statement_forgeries(base: BaseView) -> Iterator[Forgery]:
    for leg in base.legs:
        for key, value in sorted(_flat(base.info[leg]).items()):
            if key == "internal_states" or key.startswith("internal_states."):
                continue
            places = _places(base, leg, key)
            declared = key in base.declared
            for new in variants(value):
                for left_out in [None, *places] if len(places) > 1 else [None]:
                    changed = [p for p in places if p != left_out]
                    expected = oracle.statement(key, len(places), len(changed), declared)
                    name = f"statement:{leg}:{key}={json.dumps(new)}:all" + ("" if left_out is None
                                                                              else f"-but:{left_out}")
                    records = tuple(sorted({_record_of(p) for p in changed}))
                    yield Forgery("statements", name, records, expected, _statement_edit(leg, key, new, changed))


def _record_of(place: str) -> str:
    return {"server_info.json": "server_info", "overlay": "leg_spec"}.get(
        place, "bench_line" if place.startswith("bench:") else "server_log")


def _statement_edit(leg: str, key: str, value: Any, places: list[str]) -> Edit:
    def edit(run: Path) -> None:
        for place in places:
            _edit_place(run, leg, key, value, place)
    return edit


def _settings(line: Line) -> dict[str, Any]:
    lg = line.get("loadgen")
    settings = lg.get("settings") if isinstance(lg, dict) else None
    return settings if isinstance(settings, dict) else {}


def settings_forgeries(base: BaseView) -> Iterator[Forgery]:
    """A LoadGen setting changed in every line of both legs (the legs agree), with LoadGen's own detail logs
    moved or left: left, the logs' copies of the setting (the evidence model's ``stated_again``) disagree."""
    first = _settings(base.lines[base.legs[0]][0])
    copies: dict[str, list[tuple[str, float]]] = {}
    for c in evidence_model().record("loadgen_settings").stated_again:
        if c.scenario in (None, first.get("scenario")):
            copies.setdefault(c.field, []).append((c.key, c.factor))
    for name, keys in copies.items():
        if name not in first or isinstance(first[name], bool) or not isinstance(first[name], (int, float)):
            continue
        for new in variants(first[name]):
            for logs in (False, True):
                expected = (Expected("consistent", "the setting moved in every line and every LoadGen log") if logs
                            else Expected(REFUSE, f"loadgen.settings.{name} moved in every line of both legs but "
                                                  f"LoadGen's own logs still state {', '.join(k for k, _ in keys)}"))
                yield Forgery("statements", f"settings:{name}={new}:logs={logs}",
                              ("bench_line", "loadgen_settings", *(["loadgen_detail"] if logs else [])), expected,
                              _settings_edit(base.legs, name, new, keys if logs else []))


def _settings_edit(legs: tuple[str, ...], name: str, value: Any, keys: list[tuple[str, float]]) -> Edit:
    def edit(run: Path) -> None:
        logged = {key: value * unit for key, unit in keys}
        for leg in legs:
            lines = read_lines(_bench(run, leg))
            for line in lines:
                _settings(line)[name] = value
                folder = _folder(run, line)
                if logged and folder is not None:
                    edit_detail(folder / "mlperf_log_detail.txt", lambda k, v: (
                        (int(logged[k]) if isinstance(v, int) else logged[k]) if k in logged else v))
            _write_bench(run, leg, lines)
    return edit


def manifest_and_claim_forgeries(base: BaseView) -> Iterator[Forgery]:
    """run.json naming another target (its servers then report keys that target never reports), and the claim
    declaring an identity as its lever after changing it everywhere in the candidate."""
    for target in ("sglang", "vllm", "synthetic-x"):
        yield Forgery("statements", f"manifest:target={target}", ("run_manifest",),
                      Expected(REFUSE, "run.json names a target whose servers do not report these keys"),
                      _manifest_target(target))
    cand = base.legs[1]
    for key in ("tokenizer", "model", "weights_digest", "stop_token_ids", "default_max_tokens"):
        value = _flat(base.info[cand]).get(key)
        for new in variants(value)[:1]:
            places = _places(base, cand, key)
            yield Forgery("statements", f"claim:declares-identity:{key}", ("claim", "server_info", "bench_line"),
                          Expected(REFUSE, f"identity {key!r} changed in the candidate and declared as the lever"),
                          _declare(cand, key, new, places))


def _manifest_target(target: str) -> Edit:
    def edit(run: Path) -> None:
        edit_json(run / "run.json", lambda obj: obj.update(target=target))
    return edit


def _declare(leg: str, key: str, value: Any, places: list[str]) -> Edit:
    def edit(run: Path) -> None:
        _statement_edit(leg, key, value, places)(run)
        claim = next((run / "claims").glob("*.json"))
        edit_json(claim, lambda obj: obj["lever"].update(config_keys=[*obj["lever"]["config_keys"], key]))
    return edit


# ---------------------------------------------------------------------------------------------- records


def _renumber(run: Path, leg: str, line: Line, rep: int, source_leg: str | None = None) -> None:
    """``line`` made rep ``rep`` of ``leg``: its LoadGen folder copied to the rep's own, its names updated."""
    folder = _folder(run, line)
    line["leg"], line["rep"] = leg, rep
    if folder is not None and folder.is_dir():
        dest = run / "legs" / leg / "loadgen" / f"rep-{rep}"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(folder, dest)
        line["loadgen"]["dir"] = f"legs/{leg}/loadgen/rep-{rep}"


def _later(line: Line, seconds: float) -> None:
    for key in ("started_at", "ended_at"):
        if isinstance(line.get(key), (int, float)):
            line[key] += seconds


def record_forgeries(base: BaseView) -> Iterator[Forgery]:
    for leg, other in (base.legs, base.legs[::-1]):
        n = len(base.lines[leg])
        for i in range(n):
            yield Forgery("records", f"records:duplicate:{leg}:{i}", ("bench_line", "loadgen_detail", "loadgen_summary"),
                          Expected(REFUSE, "a rep written twice in its leg: one measurement counted twice"),
                          _duplicate(leg, leg, i))
            yield Forgery("records", f"records:duplicate-into:{leg}:{i}:{other}", ("bench_line", "loadgen_detail"),
                          Expected(REFUSE, "a rep copied into the other leg: its timings are the first leg's"),
                          _duplicate(leg, other, i))
            yield Forgery("records", f"records:move:{leg}:{i}:{other}", ("bench_line", "loadgen_detail"),
                          Expected(REFUSE, "a rep moved to the other leg keeps its own server's report of the "
                                           "conditions, and its old leg's server totals jump over it"),
                          _move(leg, other, i))
            yield Forgery("records", f"records:drop:{leg}:{i}", ("bench_line", "loadgen_detail"),
                          Expected(REFUSE, "a rep dropped (the later ones renumbered): the server log still counts its "
                                           "streamed requests" + (", and the server's running totals after the next "
                                                                  "rep count them too" if i < n - 1 else "")),
                          _drop(leg, i))


def _duplicate(leg: str, dest: str, index: int) -> Edit:
    def edit(run: Path) -> None:
        line = json.loads(json.dumps(read_lines(_bench(run, leg))[index]))
        lines = read_lines(_bench(run, dest))
        _renumber(run, dest, line, max(x["rep"] for x in lines) + 1)
        _later(line, 3600.0)
        _write_bench(run, dest, [*lines, line])
    return edit


def _move(leg: str, dest: str, index: int) -> Edit:
    def edit(run: Path) -> None:
        source = read_lines(_bench(run, leg))
        line = source.pop(index)
        folder = _folder(run, line)
        lines = read_lines(_bench(run, dest))
        _renumber(run, dest, line, max(x["rep"] for x in lines) + 1)
        if folder is not None and folder.is_dir():
            shutil.rmtree(folder)
        _write_bench(run, leg, source)
        _write_bench(run, dest, [*lines, line])
    return edit


def _drop(leg: str, index: int) -> Edit:
    def edit(run: Path) -> None:
        lines = read_lines(_bench(run, leg))
        dropped = lines.pop(index)
        folder = _folder(run, dropped)
        if folder is not None and folder.is_dir():
            shutil.rmtree(folder)
        for k, line in enumerate(lines[index:], index):
            old = _folder(run, line)
            _renumber(run, leg, line, k)
            if old is not None and old.is_dir() and old != _folder(run, line):
                shutil.rmtree(old)
        _write_bench(run, leg, lines)
    return edit


# -------------------------------------------------------------------------------------------- downgrades

HARNESS_ONLY = ("schema_version", "leg", "rep", "started_at", "request_starts", "latencies", "contention",
                "issue_delays", "input_lens_source", "output_lens_source", "finish_reasons", "prompt_ids",
                "request_params", "loadgen", "scenario", "issued", "ended_at", "server_counters")
REQUIRED = ("prompt_ids", "issue_delays", "request_starts", "latencies", "finish_reasons", "input_lens_source",
            "output_lens_source", "generated_texts", "input_lens", "itls", "scenario", "contention", "started_at")


def downgrade_forgeries(base: BaseView) -> Iterator[Forgery]:
    present = sorted(set.intersection(*(set(line) for leg in base.legs for line in base.lines[leg])))
    for leg in base.legs:
        yield Forgery("downgrades", f"downgrade:foreign:{leg}", ("bench_line", "loadgen_detail"),
                      Expected(REFUSE, "one leg in a foreign writer's format beside the harness's"), _foreign(leg))
        for version in (2, 3):
            yield Forgery("downgrades", f"downgrade:version{version}:{leg}", ("bench_line",),
                          Expected(REFUSE, "one leg relabelled another harness version"), _relabel(leg, version))
        for name in present:
            if name in REQUIRED or name in ("server_info", "loadgen"):
                yield Forgery("downgrades", f"downgrade:strip:{leg}:{name}", ("bench_line",),
                              Expected(REFUSE, f"{name!r} stripped from one leg's lines: a witness the other keeps"),
                              _strip((leg,), name))
        yield Forgery("downgrades", f"downgrade:strip-outputs:{leg}", ("output_line",),
                      Expected(REFUSE, "one leg's parity dump removed"), _unlink(leg, "outputs.jsonl"))
        yield Forgery("downgrades", f"downgrade:strip-log-config:{leg}", ("server_log",),
                      Expected(REFUSE, "the configuration line removed from one leg's server log"), _log_config(leg))
        yield Forgery("downgrades", f"downgrade:unseal:{leg}", ("seal_entry",),
                      Expected(REFUSE, "one leg's files left out of the seal chain"), lambda run: None,
                      unsealed=(f"legs/{leg}/",))
    for name in present:
        if name in REQUIRED:
            yield Forgery("downgrades", f"downgrade:strip-both:{name}", ("bench_line",),
                          Expected(REFUSE, f"{name!r}, a field the harness writes on every line of a rep LoadGen "
                                           "scheduled, stripped from both legs"), _strip(base.legs, name))


def _foreign(leg: str) -> Edit:
    def edit(run: Path) -> None:
        lines = read_lines(_bench(run, leg))
        for line in lines:
            folder = _folder(run, line)
            if folder is not None and folder.is_dir():
                shutil.rmtree(folder)
            for key in HARNESS_ONLY:
                line.pop(key, None)
        _write_bench(run, leg, lines)
    return edit


def _relabel(leg: str, version: int) -> Edit:
    def edit(run: Path) -> None:
        lines = read_lines(_bench(run, leg))
        for line in lines:
            line.update(schema_version=version, ended_at=line["started_at"] + line["loadgen"]["wall_s"],
                        server_counters=None)
            if version >= 3:
                line["contention"]["window"] = {"wall_s": line["loadgen"]["wall_s"] + 0.01, "machine_cpu_s": 1.0,
                                                "server_cpu_s": 0.8, "harness_cpu_s": 0.1}
        _write_bench(run, leg, lines)
    return edit


def _strip(legs: tuple[str, ...], name: str) -> Edit:
    def edit(run: Path) -> None:
        for leg in legs:
            lines = read_lines(_bench(run, leg))
            for line in lines:
                if name == "loadgen":
                    folder = _folder(run, line)
                    if folder is not None and folder.is_dir():
                        shutil.rmtree(folder)
                line.pop(name, None)
            _write_bench(run, leg, lines)
    return edit


def _unlink(leg: str, name: str) -> Edit:
    def edit(run: Path) -> None:
        (run / "legs" / leg / name).unlink(missing_ok=True)
    return edit


def _log_config(leg: str) -> Edit:
    def edit(run: Path) -> None:
        log = run / "legs" / leg / "server.log"
        log.write_text("".join(x for x in log.read_text("utf-8").splitlines(keepends=True)
                               if "effective_config" not in x), encoding="utf-8")
    return edit


# --------------------------------------------------------------------------------------- rep requests

REQUEST_RELATIONS: dict[str, tuple[str, ...]] = {
    "detail": ("loadgen_issued", "loadgen_span_within_duration", "loadgen_mean_latency", "loadgen_min_latency"),
    "summary": ("summary_is_detail",),
    "counters": ("counters_between_reps",),
}
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "errors", "request_starts", "latencies", "issue_delays",
               "generated_texts", "input_lens_source", "output_lens_source", "finish_reasons", "prompt_ids",
               "cache_hits")


def _drop_requests(line: Line, count: int) -> list[int]:
    """The ``count`` requests ending first removed from every per-request array (the last to end stays, so
    the duration stands); the indices removed."""
    ends = [s + x for s, x in zip(line["request_starts"], line["latencies"])]
    gone = sorted(sorted(range(len(ends)), key=ends.__getitem__)[:count])
    before = json.loads(json.dumps(line))
    for key in PER_REQUEST:
        if isinstance(line.get(key), list):
            line[key] = [v for i, v in enumerate(line[key]) if i not in gone]
    rederive_aggregates(line, before)
    return gone


def request_forgeries(base: BaseView) -> Iterator[Forgery]:
    choices = [(leg,) for leg in base.legs] + [tuple(base.legs)]
    n = min(len(base.lines[leg]) for leg in base.legs)
    for legs, reps, count in itertools.product(choices, _rep_subsets(n), (1, 2, 3)):
        present = frozenset({"detail", "summary", *(["counters"] if any(i > 0 for i in reps) else [])})
        for moved in moved_subsets(present):
            expected = oracle.witnesses_left(present, moved, REQUEST_RELATIONS)
            if len(legs) == 1:  # one leg's prompt set no longer the other's: a load difference besides
                expected = Expected(REFUSE, expected.why + "; the legs' prompt sets differ")
            name = f"requests:{'+'.join(legs)}:reps={','.join(map(str, reps))}:drop{count}:moved={'+'.join(sorted(moved))}"
            yield Forgery("witnesses", name, records_moved(moved), expected, _request_edit(legs, reps, count, moved))


def _request_edit(legs: tuple[str, ...], reps: tuple[int, ...], count: int, moved: frozenset[str]) -> Edit:
    def edit(run: Path) -> None:
        for leg in legs:
            lines = read_lines(_bench(run, leg))
            removed_requests = removed_tokens = 0
            for i, line in enumerate(lines):
                if i in reps:
                    tokens = sum(line["output_lens"])
                    gone = _drop_requests(line, count)
                    removed_requests += len(gone)
                    removed_tokens += tokens - sum(line["output_lens"])
                    _request_logs(run, line, moved)
                if "counters" in moved and removed_requests:
                    state = line["server_info"]["internal_states"][0]
                    for key in ("requests_admitted", "requests_completed"):
                        state[key] -= removed_requests
                    state["tokens_generated"] -= removed_tokens
            _write_bench(run, leg, lines)
    return edit


def _request_logs(run: Path, line: Line, moved: frozenset[str]) -> None:
    """LoadGen's figures recomputed from the line as it now is (its samples, rates and latencies)."""
    folder = _folder(run, line)
    if folder is None:
        return
    n = len(line["errors"])
    issued = [d + x for d, x in zip(line["issue_delays"], line["latencies"])]
    span = max(issued)
    figures = {"result_samples_per_second": round(n / span, 6), "result_tokens_per_second":
               round(sum(line["output_lens"]) / span, 6), "result_min_latency_ns": int(min(issued) * 1e9),
               "result_mean_latency_ns": int(sum(issued) / n * 1e9), "generated_samples_per_query": n,
               "effective_samples_per_query": n}
    if "detail" in moved:
        edit_detail(folder / "mlperf_log_detail.txt", lambda k, v: figures.get(k, v))
    if "summary" in moved:
        printed = {"Samples per second": f"{figures['result_samples_per_second']:.6g}",
                   "Tokens per second": f"{figures['result_tokens_per_second']:.6g}",
                   "Min latency (ns)": str(figures["result_min_latency_ns"]),
                   "Mean latency (ns)": str(figures["result_mean_latency_ns"]), "samples_per_query": str(n)}
        edit_summary(folder / "mlperf_log_summary.txt", lambda k, v: printed.get(k, v))


FAMILIES: tuple[Callable[[BaseView], Iterator[Forgery]], ...] = (
    statement_forgeries, settings_forgeries, manifest_and_claim_forgeries, record_forgeries, downgrade_forgeries,
    request_forgeries)
