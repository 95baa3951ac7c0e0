"""Lay out a run directory from benchmark result files a person already has (``perfwarden audit-bench``).

The files are someone else's (``vllm bench serve --save-result --save-detailed``, or
``sglang.bench_serving --output-details``), so they are read as hostile input (``formats/safe_read.py``:
regular files, bounded) and copied byte for byte, never linked, through the harness's safe writers into
the layout of design §2:

- ``run.json``: the target is the engine named (``--engine``), which is what attributes the legs'
  ``server_info`` keys to that engine's knobs (``auditor/data/target_keys.json``);
- ``legs/baseline`` and ``legs/candidate``: ``bench_runs.jsonl`` is the leg's files one after another,
  each result one line (vLLM ends a file without a newline; one is put between files, never inside one),
  ``server.log`` a copy of the server's log, ``server_info.json`` a copy of ``--server-info`` or, for
  vLLM, what the copied log says of the launch (``harness.vllm_target.reported_info``, inert keys such as
  the port left to the log, where the auditor reads them); ``leg.json`` names where the leg came from;
- ``claims/001-patch.json``: a ``Claim`` of scope ``patch`` with the declared change, the headline metric,
  the stated delta and goodput SLO when given.

Every copied bench file is read back as the auditor will read it: a line that is not a benchmark record
(not JSON, a field of the wrong type, a torn tail) is bad input, named with its file and line. Nothing
here judges the numbers; the auditor does, and the evidence stays unsealed: its verdict is never banked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from perfwarden.auditor.model import roles
from perfwarden.formats import strict_json
from perfwarden.formats.jsonl import BenchRunLine, LineIssue, iter_jsonl
from perfwarden.formats.records import (Claim, Correctness, DeclaredLever, Headline, LegRefs, LegSpec, RunDir,
                                        RunManifest, write_json_atomic)
from perfwarden.formats.safe_read import RECORD_BYTES, TEXT_BYTES, GiB, iter_chunks, read_bytes
from perfwarden.formats.safe_write import make_dirs, open_append, write_bytes
from perfwarden.formats.slo import GoodputSlo
from perfwarden.harness.target_config import TARGET_CONFIGS, ConfigError
from perfwarden.harness.vllm_target import MAX_LOG_LINE, parse_log, reported_info

Engine = Literal["vllm", "sglang"]
LEGS = ("baseline", "candidate")
CLAIM = "claims/001-patch.json"
BENCH_FILE_BYTES = 4 * GiB
"""Largest benchmark file copied (a 1 GiB result line, the auditor's bound for one rep, several times)."""
LOG_CONFIG_MARKERS = ("non-default args", "Initializing a V1 LLM engine")
"""The lines of a vLLM log that state its launch (``harness.vllm_target.parse_log``)."""


class BenchInputError(ValueError):
    """A file handed to ``audit-bench`` cannot be used (exit 3): which file, which line and why."""


@dataclass(frozen=True)
class BenchImport:
    """What a person hands ``audit-bench``."""

    baseline: list[Path]
    candidate: list[Path]
    engine: Engine = "vllm"
    server_info: tuple[Path, Path] | None = None
    server_log: tuple[Path, Path] | None = None
    change: list[str] = field(default_factory=list)
    """The declared change: the knobs (the engine's own names) the candidate changes."""
    metric: str = "output_throughput"
    delta_pct: float | None = None
    slo: GoodputSlo | None = None

    def legs(self) -> dict[str, list[Path]]:
        return {"baseline": self.baseline, "candidate": self.candidate}


def declared_lever(engine: Engine, change: list[str]) -> DeclaredLever | None:
    """The declared change as a lever: each knob's class from the engine's config model (``ConfigError``
    for a name that is not one of its knobs)."""
    if not change:
        return None
    config = TARGET_CONFIGS[engine]
    specs = [config.spec(key) for key in change]
    return DeclaredLever(name=",".join(change), lever_class="A" if all(s.lever_class == "A" for s in specs) else "B",
                         config_keys=list(change))


def lay_out(run: Path, spec: BenchImport) -> Path:
    """Write the run directory ``run`` (which must be new and empty) from ``spec``; returns the claim's path.
    ``BenchInputError`` for a file that cannot be used, ``OSError`` for one that cannot be read or written."""
    try:
        lever = declared_lever(spec.engine, spec.change)
    except ConfigError as exc:
        raise BenchInputError(f"--change: {exc}") from None
    paths = RunDir(run)
    digest = hashlib.sha256()
    model = None
    for index, (leg, files) in enumerate(spec.legs().items()):
        make_dirs(paths.leg_dir(leg), run)
        stated = _copy_bench(files, paths.bench_runs(leg), run, digest)
        model = model or stated
        write_json_atomic(paths.leg_spec(leg), LegSpec(
            leg=leg, role="baseline" if leg == "baseline" else "candidate",
            purpose=f"imported by perfwarden audit-bench from {', '.join(p.name for p in files)}"), run)
        if spec.server_log is not None:
            _copy_stream(spec.server_log[index], paths.server_log(leg), run, TEXT_BYTES, "server log")
        if spec.server_info is not None:
            _copy_server_info(spec.server_info[index], paths.server_info(leg), run)
        elif spec.server_log is not None and spec.engine == "vllm":
            _write_reported_info(spec.server_log[index], paths.server_log(leg), paths.server_info(leg), run)
    write_json_atomic(paths.manifest, RunManifest(id=f"audit-bench-{digest.hexdigest()[:12]}", target=spec.engine,
                                                  model=model or "unknown"), run)
    claim = Claim(seq=1, scope="patch", producer="audit-bench", legs=LegRefs(baseline="baseline", candidate="candidate"),
                  lever=lever, headline=Headline(metric=spec.metric, value=spec.delta_pct, slo=spec.slo),
                  correctness=Correctness(parity="exact_text"))
    make_dirs(run / "claims", run)
    write_json_atomic(run / CLAIM, claim, run)
    return run / CLAIM


@dataclass
class _Copied:
    """What one stream copy wrote."""

    newlines: int = 0
    ended: bool = True
    """The bytes written end in a newline (or none were written)."""


def _copy_stream(source: Path, dest: Path, run: Path, limit: int, what: str, newline_first: bool = False,
                 digest: "hashlib._Hash | None" = None) -> _Copied:
    """Append ``source``'s bytes to ``dest`` (a newline first when asked), one bounded piece at a time."""
    copied = _Copied()
    with open_append(dest, run) as out:
        if newline_first:
            out.write(b"\n")
            copied.newlines += 1
        for piece in iter_chunks(source, None, limit=limit, what=what):
            out.write(piece)
            if digest is not None:
                digest.update(piece)
            copied.newlines += piece.count(b"\n")
            copied.ended = piece.endswith(b"\n")
    return copied


@dataclass
class _Segment:
    source: Path
    first_line: int
    """Line of the leg's copied file where this input file's first line landed."""


def _copy_bench(files: list[Path], dest: Path, run: Path, digest: "hashlib._Hash") -> str | None:
    """Copy a leg's files into its ``bench_runs.jsonl`` and read the copy back as the auditor will; returns
    the model the first record names (for run.json), if it names one."""
    segments: list[_Segment] = []
    lines, ended = 0, True
    for source in files:
        segments.append(_Segment(source, lines + (1 if ended else 2)))
        copied = _copy_stream(source, dest, run, BENCH_FILE_BYTES, "benchmark file", not ended, digest)
        lines, ended = lines + copied.newlines, copied.ended
    return _check_copy(dest, run, segments)


def _check_copy(dest: Path, run: Path, segments: list[_Segment]) -> str | None:
    issues: list[LineIssue] = []
    model = None
    count = 0
    for _, record in iter_jsonl(dest, BenchRunLine, issues, root=run):
        count += 1
        if model is None:
            model = _named_model(record)
    bad = [issue for issue in issues if issue.kind != "foreign_fields"]
    if bad:
        source, line = _source_of(segments, bad[0].ref.line)
        raise BenchInputError(f"{str(source)!r} line {line}: not a benchmark result ({bad[0].kind}): "
                              f"{bad[0].message}")
    if count == 0:
        raise BenchInputError(f"{', '.join(repr(str(s.source)) for s in segments)}: no benchmark result in the file(s)")
    return model


def _named_model(record: BenchRunLine) -> str | None:
    """The model a foreign record names (``model_id``), when it is a string (read behind the depth bound)."""
    raw = getattr(record, "model_id", None)
    if raw is None:
        return None
    try:
        value = strict_json.loads(bytes(raw), what="model_id")
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _source_of(segments: list[_Segment], line: int) -> tuple[Path, int]:
    """The input file and its own line number for line ``line`` of a leg's copied file."""
    owner = segments[0]
    for segment in segments:
        if segment.first_line <= line:
            owner = segment
    return owner.source, line - owner.first_line + 1


def _copy_server_info(source: Path, dest: Path, run: Path) -> None:
    data = read_bytes(source, None, limit=RECORD_BYTES, what="server info")
    try:
        obj = strict_json.loads(data, what=f"server info {str(source)!r}")
    except (ValueError, RecursionError) as exc:
        raise BenchInputError(f"--server-info {str(source)!r} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BenchInputError(f"--server-info {str(source)!r} is not a JSON object")
    write_bytes(dest, data, run)


def _write_reported_info(source: Path, log: Path, dest: Path, run: Path) -> None:
    """``server_info.json`` from what the copied vLLM log states of its launch (inert keys left to the log)."""
    parsed = parse_log("\n".join(_config_lines(log, run)))
    if parsed["args"] is None:
        raise BenchInputError(f"--server-log {str(source)!r} has no readable vLLM 'non-default args' line: the "
                              "server's launch arguments are not in it (pass --server-info instead)")
    info = {key: value for key, value in reported_info(parsed).items() if not roles.is_inert(key)}
    write_bytes(dest, (json.dumps(info, indent=2, sort_keys=True, default=str) + "\n").encode(), run)


def _config_lines(log: Path, run: Path) -> Iterator[str]:
    """The log's launch lines, streamed (a line longer than vLLM's parser reads is skipped, never held)."""
    pending = b""
    for piece in iter_chunks(log, run, limit=TEXT_BYTES, what="server log"):
        *whole, pending = (pending + piece).split(b"\n")
        yield from (_decoded(line) for line in whole if _is_config(line))
        if len(pending) > MAX_LOG_LINE:
            pending = b""
    if _is_config(pending):
        yield _decoded(pending)


def _is_config(line: bytes) -> bool:
    return len(line) <= MAX_LOG_LINE and any(marker.encode() in line for marker in LOG_CONFIG_MARKERS)


def _decoded(line: bytes) -> str:
    return line.decode("utf-8", "replace")
