"""The LLM-free coherence check, against recorded real and random-weight model outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwarden.auditor import coherence as C

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "proof" / "calibration" / "coherence_samples.json"
SGLANG = REPO.parent / "shared" / "corpus" / "sglang" / "bench_serving_llamacpp_smollm2.jsonl"

POSITIVE = ("real_chat",)
NEGATIVE = ("random_chat", "random_raw", "random_tokens", "degenerate")


def _groups() -> dict[str, list[str]]:
    doc = json.loads(SAMPLES.read_text(encoding="utf-8"))
    groups: dict[str, list[str]] = {}
    for sample in doc["samples"]:
        groups.setdefault(sample["group"], []).append(sample["text"])
    return groups


# ------------------------------------------------------------------------- recorded model outputs


def test_recorded_samples_are_real_recordings_with_provenance():
    doc = json.loads(SAMPLES.read_text(encoding="utf-8"))
    assert doc["model"] == "SmolLM2-135M-Instruct"
    assert doc["weights_digest"].startswith("sha256:")
    groups = _groups()
    assert {len(groups[g]) for g in ("real_chat", "real_raw", "random_chat", "random_raw")} == {32}
    assert len(set(groups["real_chat"])) == 32  # 32 distinct prompts, 32 distinct answers
    assert all("score" not in s for s in doc["samples"])  # data only; never the function's own output


def test_threshold_separates_every_judged_real_chat_text_from_every_negative():
    groups = _groups()
    positives = [s.score for g in POSITIVE for s in C.coherence_score(groups[g]).per_text]
    negatives = [s.score for g in NEGATIVE for s in C.coherence_score(groups[g]).per_text if s.judged]
    assert None not in positives and len(positives) == 32
    assert len(negatives) >= 80
    assert min(positives) >= C.THRESHOLD > max(negatives)
    # The margin the calibration documents, on both sides.
    assert min(positives) - C.THRESHOLD >= 0.15 and C.THRESHOLD - max(negatives) >= 0.15


@pytest.mark.parametrize(
    "group,expected",
    [
        ("real_chat", True),
        ("real_raw", True),
        ("real_raw_ignore_eos", True),
        ("random_chat", False),
        ("random_raw", False),
        ("random_tokens", False),
        ("degenerate", False),
    ],
)
def test_each_recorded_set_gets_its_label(group, expected):
    result = C.coherence_score(_groups()[group])
    assert result.is_coherent is expected, result.reasons


def test_real_model_loops_are_flagged_per_text_but_do_not_condemn_the_set():
    result = C.coherence_score(_groups()["real_raw_ignore_eos"])
    loops = [s for s in result.per_text if s.judged and not s.is_coherent]
    assert loops and all(max(s.repeated_trigram_ratio or 0, s.adjacent_repeat_ratio or 0) > 0.3 for s in loops)
    assert result.is_coherent and result.coherent_fraction is not None and result.coherent_fraction > 0.7


@pytest.mark.corpus
def test_real_sglang_texts_are_scored_and_reported_without_forcing_a_label(capsys):
    if not SGLANG.is_file():
        pytest.skip(f"corpus file {str(SGLANG)!r} not present")
    for number, line in enumerate(SGLANG.read_text().splitlines(), start=1):
        texts = json.loads(line)["generated_texts"]
        result = C.coherence_score(texts)
        assert result.n_texts == 20
        assert result.n_judged == sum(1 for t in texts if len(t) >= C.MIN_CHARS)
        assert result.score is None or 0.0 <= result.score <= 1.0
        with capsys.disabled():
            print(
                f"\nsglang line {number}: score={result.score!r} is_coherent={result.is_coherent!r} "
                f"judged={result.n_judged}/{result.n_texts} coherent_fraction={result.coherent_fraction!r}"
            )


# ------------------------------------------------------------------------------------ behaviour


def test_no_texts_or_only_empty_texts_are_not_coherent():
    for texts in ([], ["", " ", "\n"], ["Paris.", "Yes.", "ok"]):
        result = C.coherence_score(texts)
        assert not result.is_coherent and result.score is None and result.reasons


def test_too_few_judged_texts_are_not_enough_evidence():
    good = "The heart pumps blood through the body and keeps every cell supplied with oxygen."
    result = C.coherence_score([good, "", "", "", ""])
    assert result.score is not None and result.score >= C.THRESHOLD
    assert not result.is_coherent
    assert any("long enough to judge" in r for r in result.reasons)
    assert C.coherence_score([good]).is_coherent  # one text given, one judged: enough


def test_wordless_long_outputs_are_judged_as_incoherent():
    for text in ("\r\n" * 30, "\ufffd" * 40, "..." * 20, "ockockockockockockockockock"):
        stats = C.text_stats(0, text)
        assert stats.judged and stats.score is not None and stats.score < C.THRESHOLD, text


def test_garbage_characters_lower_the_score():
    clean = "The river flows past the old town and into the sea near the harbor."
    dirty = "The river fl\u00f6ws p\u00e4st th\u00eb \u00f6ld t\u00f6wn \u00e4nd \u00efnt\u00f6 th\u00eb s\u00eb\u00e4."
    assert C.text_stats(0, dirty).garbage_fraction > 0.1
    assert C.text_stats(0, dirty).score < C.text_stats(0, clean).score


def test_inflected_common_words_count():
    for word in ("cities", "running", "stopped", "Making", "quickly", "children's", "don't", "Bees"):
        assert C.is_common_word(word), word
    for word in ("xqzt", "ockock", "glutamate"):
        assert not C.is_common_word(word), word


def test_statistics_on_hand_made_inputs():
    words = "the cat sat on the mat the cat sat on the mat".split()
    assert C.repeated_ngram_ratio(words) == pytest.approx(1 - 6 / 10)
    assert C.adjacent_repeat_ratio(["a", "a", "b", "b"]) == pytest.approx(2 / 3)
    assert C.char_entropy("abab") == pytest.approx(1.0) and C.char_entropy("aaaa") == 0.0
    assert C.entropy_factor(None) == 0.0 and C.entropy_factor(10.0) == 1.0
    assert C.compression_ratio("") is None and C.garbage_fraction("   ") is None


def test_result_is_deterministic_and_typed():
    texts = _groups()["real_chat"][:5]
    a, b = C.coherence_score(texts), C.coherence_score(texts)
    assert a == b and a.version == C.COHERENCE_VERSION and a.threshold == C.THRESHOLD
    assert json.loads(a.model_dump_json())["n_texts"] == 5


def test_word_list_ships_as_package_data():
    words = C.common_words()
    assert len(words) > 2000 and all(w == w.lower() and " " not in w for w in words)
