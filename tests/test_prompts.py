"""Prompt sets: deterministic, varied, tokenizer-free, and a parity subset that never moves."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from perfwarden.harness import prompts as P


def test_varied_set_is_several_dozen_unique_prompts_of_varied_length():
    texts = [p.text for p in P.VARIED_PROMPTS]
    assert len(texts) >= 36
    assert len(set(texts)) == len(texts)
    assert len({p.id for p in P.VARIED_PROMPTS}) == len(texts)
    words = sorted(len(t.split()) for t in texts)
    assert words[0] <= 6 and words[-1] >= 100, "lengths must span short chat turns to long instructions"
    assert all(p.source == "varied" for p in P.VARIED_PROMPTS)


def test_varied_prompts_seeded_shuffle_and_cut():
    assert P.varied_prompts() == list(P.VARIED_PROMPTS)
    a, b = P.varied_prompts(10, seed=7), P.varied_prompts(10, seed=7)
    assert a == b and len(a) == 10
    assert P.varied_prompts(10, seed=8) != a
    assert sorted(p.id for p in P.varied_prompts(seed=3)) == sorted(p.id for p in P.VARIED_PROMPTS)
    with pytest.raises(ValueError, match="n="):
        P.varied_prompts(len(P.VARIED_PROMPTS) + 1)
    with pytest.raises(ValueError):
        P.varied_prompts(0)


def test_parity_subset_is_fixed_and_drawn_from_the_varied_set():
    parity = P.parity_prompts()
    assert [p.id for p in parity] == list(P.PARITY_IDS)
    assert len(parity) == 12
    varied = {p.id: p for p in P.VARIED_PROMPTS}
    assert all(varied[p.id] == p for p in parity)
    assert len({len(p.text) for p in parity}) == 12, "parity prompts should differ in length"


def test_random_word_prompts_are_reproducible_and_vocabulary_only():
    a = P.random_word_prompts(20, input_len=30, range_ratio=0.5, seed=42)
    assert a == P.random_word_prompts(20, input_len=30, range_ratio=0.5, seed=42)
    assert a != P.random_word_prompts(20, input_len=30, range_ratio=0.5, seed=43)
    vocab = set(P.VOCABULARY)
    for p in a:
        words = p.text.split()
        assert 15 <= len(words) <= 30
        assert set(words) <= vocab
        assert p.source == "random_words" and p.id.startswith("r42-")
    assert len({p.id for p in a}) == 20


def test_random_word_lengths_follow_sglang_range_rule():
    fixed = P.random_word_lengths(50, input_len=16, range_ratio=1.0, seed=1)
    assert fixed == [16] * 50
    spread = P.random_word_lengths(500, input_len=16, range_ratio=0.0, seed=1)
    assert min(spread) >= 1 and max(spread) == 16 and len(set(spread)) > 8
    with pytest.raises(ValueError):
        P.random_word_lengths(5, input_len=16, range_ratio=1.5)
    with pytest.raises(ValueError):
        P.random_word_lengths(0, input_len=16)


def test_random_words_do_not_depend_on_hash_seed_or_global_random():
    random.seed(123)
    here = [p.text for p in P.random_word_prompts(3, 12, seed=5)]
    code = ("from perfwarden.harness.prompts import random_word_prompts as r;"
            "print(repr([p.text for p in r(3, 12, seed=5)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "999", "PATH": ""})
    assert out.stdout.strip() == repr(here)


def test_vocabulary_has_no_duplicates():
    assert len(set(P.VOCABULARY)) == len(P.VOCABULARY) >= 200


def test_estimate_tokens_is_positive_and_grows_with_length():
    assert P.estimate_tokens("") == 1
    assert P.estimate_tokens("hello") >= 1
    assert P.estimate_tokens("word " * 100) > P.estimate_tokens("word " * 10)
    assert P.VARIED_PROMPTS[0].est_tokens == P.estimate_tokens(P.VARIED_PROMPTS[0].text)
