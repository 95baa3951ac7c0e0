"""Readers whose memory follows the bound, not the input: a long line costs a small multiple of itself,
and a file of ever-new texts costs digests, not its texts.

Memory is measured with ``tracemalloc`` (Python's own allocations, what these readers hold); the RSS
figures at the documented 64 MiB line bound are ``benchmarks/big_inputs.py``'s.
"""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from perfwarden.auditor import coherence
from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.evidence import SERVED_TEXT_CHARS, ServedReader
from perfwarden.auditor.gates.served import consistent, same_text
from perfwarden.formats.jsonl import BenchRunLine, LineRef
from perfwarden.orchestrator.synth import COHERENT_TEXTS

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
ENGLISH = "The quick brown fox jumps over the lazy dog, and then it rests in the shade. "


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _text(chars: int) -> str:
    return (ENGLISH * (chars // len(ENGLISH) + 1))[:chars]


def test_a_long_texts_statistics_cost_pieces_not_copies():
    """Word lists, trigram tuples and character lists of a whole text would hold over 100 times its size;
    read in pieces, a text four times as long costs no more scratch."""
    short, long = _text(coherence.PIECE_CHARS), _text(4 * coherence.PIECE_CHARS)  # built outside the figures
    coherence.text_stats(0, short)  # one-time costs (imports, caches) out of the figures too
    one = _peak(lambda: coherence.text_stats(0, short))
    four = _peak(lambda: coherence.text_stats(0, long))
    # Whole-text statistics grew about 4x with the text (16.4 -> 64.6 MB); in pieces the scratch stays that of
    # a piece or two (a long text is cut into piece-sized slices; a one-piece text is used whole), whatever its length.
    assert four < one + 2 * coherence.PIECE_CHARS, (one, four)


def test_served_texts_past_the_bound_are_counted_by_digest():
    """A pid served a new text in every line: the texts held stop at the bound, the count goes on."""
    reader = ServedReader()
    size, lines = 1 << 20, SERVED_TEXT_CHARS // (1 << 20) + 32
    ref = LineRef(Path("bench_runs.jsonl"), 1, 0, 0)

    def feed() -> None:
        for k in range(lines):
            text = f"{k:08d}" + "x" * size  # a new text every line
            reader.add(ref, BenchRunLine(prompt_ids=["p"], generated_texts=[text]))

    peak = _peak(feed)
    served = reader.result()
    assert served is not None and sum(served.texts["p"].values()) == lines
    assert reader.held_chars <= SERVED_TEXT_CHARS
    assert peak < SERVED_TEXT_CHARS + 8 * size, peak


def test_a_text_known_by_its_digest_never_agrees_with_a_dump_but_compares_across_legs():
    reader = ServedReader(held_chars=SERVED_TEXT_CHARS)  # the bound already reached
    reader.add(LineRef(Path("b"), 1, 0, 0), BenchRunLine(prompt_ids=["p"], generated_texts=["Paris is"]))
    modal = reader.result().modal("p")
    assert isinstance(modal, bytes)
    assert not consistent("Paris is", modal)  # fail closed: the prefix cannot be shown
    assert same_text(modal, "Paris is") and not same_text(modal, "Paris was")


def test_a_dump_made_from_texts_known_by_their_digest_is_judged_not_crashed(tmp_path):
    """A foreign run with no parity dump is given one from its served texts (positional); past the bound
    a text is known only by its digest. The dump holds a stand-in for it (a text no decoder yields): it
    agrees with the same digest and nothing else, and the coherence check scores the texts it can read
    (it once crashed on the digest's bytes)."""
    from perfwarden.auditor.evidence import LegEvidence, digest_stand_in, served_dump, stood_in_digest
    from perfwarden.auditor.gates.correctness import check_reference_coherence

    reader = ServedReader()
    ref = LineRef(Path("bench_runs.jsonl"), 1, 0, 2, digest="0" * 64, head=b"{}")  # as the loader cites it
    texts = list(COHERENT_TEXTS[:6])
    reader.add(ref, BenchRunLine(prompt_ids=[f"p{k}" for k in range(6)], generated_texts=texts))
    reader.held_chars = SERVED_TEXT_CHARS  # the bound reached: the next new text is counted by digest
    reader.add(ref, BenchRunLine(prompt_ids=["q"], generated_texts=["Paris is the capital of France."]))
    served = reader.result()
    assert served is not None
    dump = served_dump(served)
    stand_ins = [o.text for _, o in dump if stood_in_digest(o.text) is not None]
    assert len(stand_ins) == 1 and all(isinstance(o.text, str) for _, o in dump)
    digest = served.modal("q")
    assert isinstance(digest, bytes) and stand_ins[0] == digest_stand_in(digest)
    assert consistent(stand_ins[0], digest) and not consistent(stand_ins[0], digest[::-1])
    assert not consistent("Paris is", digest)
    leg = LegEvidence(name="base")
    leg.outputs = dump
    assert check_reference_coherence(tmp_path, leg).value is True
    leg.outputs = [(r, o) for r, o in dump if stood_in_digest(o.text) is not None]
    judged = check_reference_coherence(tmp_path, leg)  # nothing readable: unjudgeable, fail closed
    assert judged.value is False and [f.code for f in judged.findings] == ["NONCOHERENT_REFERENCE"]


@pytest.mark.slow
def test_a_long_output_line_audits_in_a_small_multiple_of_itself(tmp_path):
    """A text in the reference leg's parity dump, 1 MiB then 3 MiB: the audit's own allocations grow by a
    few times the text's growth (the decoded dump, the line being read), not over a hundred times (what a
    regex's stack over the line or word and trigram lists of the whole text would hold)."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "rec-response-cache" / "run", run)
    claim = run / "claims" / "001-patch.json"
    path = run / "legs" / "base" / "outputs.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[3])
    audit_path(run, claim)  # imports and caches: not the text's cost
    peaks = []
    for size in (1 << 20, 3 << 20):
        record["text"] = _text(size)
        lines[3] = json.dumps(record)
        path.write_text("\n".join(lines) + "\n")
        peaks.append(_peak(lambda: audit_path(run, claim)))
    assert peaks[1] - peaks[0] < 5 * (2 << 20), peaks


def test_a_profile_line_over_its_bound_is_refused_unread(tmp_path):
    """A profile line's shapes decode to ten times their bytes: a line over ``PROFILE_LINE_BYTES`` (real
    ones are under 1 KiB) is corrupt and hashed while skipped, never decoded."""
    from perfwarden.auditor.evidence import RunLoader
    from perfwarden.auditor.gates.reading import check_reading
    from perfwarden.formats.safe_read import PROFILE_LINE_BYTES

    profile = tmp_path / "profile" / "profile.jsonl"
    profile.parent.mkdir()
    shapes = ",".join(["[1,5,576]"] * (PROFILE_LINE_BYTES // 10 + 1))
    profile.write_text('{"name": "rmsnorm", "self_time_us": 1.0, "shapes": [[1,1,576]]}\n'
                       '{"name": "mm", "self_time_us": 2.0, "shapes": [' + shapes + ']}\n')
    loader = RunLoader(tmp_path)
    peak = _peak(loader.profile)
    records = loader.profile()
    assert [r.name for _, r in records] == ["rmsnorm"]
    corrupt = [f for f in check_reading(loader.problems).findings if f.code == "EVIDENCE_CORRUPT"]
    assert corrupt and "bound" in corrupt[0].message and corrupt[0].evidence[0].line == 2
    assert peak < 2 * PROFILE_LINE_BYTES, peak  # at most the bound in pieces: the shapes were never decoded
