"""A server log of millions of distinct ``ENGAGED`` lines is read at a small multiple of a plain log's cost.

Every such line holds a mechanism's literals, so the one pass cannot skip it unread; what it must not do
is run every pattern that shares a literal with it, each trying every position of the line with case
folding. The work is counted, not timed: how often the regular-expression engine is entered per line
(``sys.setprofile`` sees each call into ``re``), so the test says the same on a busy machine. The wall and
CPU seconds against a plain log of the same size are ``benchmarks/big_inputs.py --only log``'s.
"""

from __future__ import annotations

import sys

from perfwarden.auditor.serverlog import scan_server_log

ENGAGED = "2026-11-22T02:28:42.626 INFO perfwarden.embedded: ENGAGED op_override op='op{:08d}' first call\n"
PLAIN = "2026-11-22T02:28:42.626 INFO perfwarden.embedded: request done rid={:08d} tokens=128 ms=42.0\n"


def _regex_calls(text: str) -> tuple[int, object]:
    calls = 0

    def count(frame, event, arg):  # noqa: ARG001 - the profiler's signature
        nonlocal calls
        if event == "c_call" and getattr(arg, "__qualname__", "").startswith("Pattern."):
            calls += 1

    sys.setprofile(count)
    try:
        log = scan_server_log([text.encode()], "server.log", ("rmsnorm",), 64 * 1024)
    finally:
        sys.setprofile(None)
    return calls, log


def test_a_flood_of_distinct_engaged_lines_runs_two_patterns_a_line():
    """Past the first configuration lines (held and parsed, a bounded number): the not-engaged check's
    literal-first probe and the kernel-override pattern, and nothing else, per further line."""
    counts = {}
    for lines in (2000, 6000):
        counts[lines], log = _regex_calls("".join(ENGAGED.format(k) for k in range(lines)))
        held = log.signal_count("kernel_override")  # the first kinds held, every further line counted
        assert log.n_lines == lines and any(f"{lines - held} mechanism line(s)" in note for note in log.notes)
    plain_calls, _ = _regex_calls("".join(PLAIN.format(k) for k in range(6000)))
    assert plain_calls < 10
    per_line = (counts[6000] - counts[2000]) / 4000
    assert per_line <= 2.0, per_line
