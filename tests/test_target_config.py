"""The config model per target: one place for every knob, and no drift from the auditor's registry."""

from __future__ import annotations

import pytest

from perfwarden.auditor import registry
from perfwarden.auditor.model import roles
from perfwarden.harness.labs.embedded import EmbeddedLab
from perfwarden.harness.target_config import (TARGET_CONFIGS, ConfigError, EmbeddedConfig, SGLangConfig,
                                              parse_set_args)
from perfwarden.orchestrator.simlab import SyntheticLab

from source_tree import ROOT, source_files

# Knobs the auditor's registry (auditor/data/levers.json) does not know. Empty: the registry
# classifies every knob of every target model; a new knob must be added to the registry, or listed here
# with why, before this test passes.
REGISTRY_GAPS: dict[str, set[str]] = {"embedded": set(), "sglang": set(), "vllm": set()}


@pytest.mark.parametrize("target", sorted(TARGET_CONFIGS))
def test_every_knob_has_the_registrys_class_and_lossiness(target):
    model = TARGET_CONFIGS[target]
    lossiness = registry.levers()["lossiness"]
    lossy_keys = set(lossiness["lossless_values"]) | set(lossiness.get("always_lossy", []))
    unknown = set()
    for name, spec in model.specs().items():
        assert not roles.is_inert(name), f"{target}.{name} is a knob, the registry calls it inert"
        cls, why = registry.lever_class(name)
        if cls is None:
            unknown.add(name)
            continue
        assert cls == spec.lever_class, f"{target}.{name}: model says {spec.lever_class}, registry {cls} ({why})"
        assert spec.lossless == (name not in lossy_keys), f"{target}.{name}: lossless={spec.lossless} disagrees"
    assert unknown <= REGISTRY_GAPS[target], f"knobs the registry does not know: {sorted(unknown)}"


def test_the_spec_decode_knobs_are_the_registrys_spec_decode_keys():
    for model in TARGET_CONFIGS.values():
        for name, spec in model.specs().items():
            assert (spec.mechanism == "speculative_decoding") == registry.is_spec_decode_key(name), name


def test_one_default_everywhere():
    """max_batch_size used to have four different defaults; now the server, the engine and both labs
    read the model's."""
    defaults = EmbeddedConfig.defaults()
    embedded_engine = pytest.importorskip("perfwarden.harness.embedded_engine", reason="the engine needs torch")
    embedded_server = pytest.importorskip("perfwarden.harness.embedded_server", reason="the server needs torch")
    assert embedded_server.ServerConfig().max_batch_size == defaults["max_batch_size"] == 1
    assert embedded_engine.EngineOptions().max_batch_size == defaults["max_batch_size"]
    assert embedded_engine.EngineOptions().batch_wait_ms == defaults["batch_wait_ms"]
    assert EmbeddedLab().base_config() == EmbeddedConfig()
    sim = SyntheticLab().base_config().model_dump()
    assert {k: sim[k] for k in defaults if k != "threads"} == {k: v for k, v in defaults.items() if k != "threads"}


def test_search_space_and_allowed_values_come_from_the_model():
    assert EmbeddedConfig.search_knobs(None) == ["max_batch_size", "attn_implementation"]
    # the cheats, lossy knobs and scenario-dependent knobs are searched only when named
    for name in ("response_cache", "prompt_lookup", "quantization", "dtype", "batch_wait_ms"):
        assert not EmbeddedConfig.spec(name).default_search
    assert EmbeddedConfig.search_knobs(["quantization", "max_batch_size=4"]) == ["max_batch_size", "quantization"]
    assert EmbeddedConfig.allowed_values("attn_implementation") == ("eager", "sdpa")
    assert EmbeddedConfig.allowed_values("response_cache") == (False, True)
    assert EmbeddedConfig.allowed_values("max_seq_len") == ()  # a limit, not searchable
    with pytest.raises(ConfigError, match="'warp_speed'"):
        EmbeddedConfig.search_knobs(["warp_speed"])
    assert "mem_fraction_static" in SGLangConfig.search_knobs(None)
    assert not SGLangConfig.spec("kv_cache_dtype").lossless


def test_validation_names_the_knob():
    with pytest.raises(ConfigError, match="unknown knob 'fast'"):
        EmbeddedConfig.validate_knobs(parse_set_args(["fast=1"]))
    with pytest.raises(ConfigError, match="'max_batch_size'='0'"):
        EmbeddedConfig.validate_knobs({"max_batch_size": "0"})
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        SGLangConfig.validate_knobs({"mem_fraction_static": 1.5})


def _restated_defaults() -> list[str]:
    """``<config>.get("<knob>", <default>)`` in the producer side: a reader restating a knob's default."""
    import re

    knobs = "|".join(sorted({k for model in TARGET_CONFIGS.values() for k in model.model_fields}))
    pattern = re.compile(r"\b\w*(?:config|knobs|cfg|base)\w*\.get\(\s*[\"'](?:" + knobs + r")[\"']\s*,")
    return [f"{path.relative_to(ROOT)}:{i}" for folder in ("agents", "orchestrator", "harness", "cli")
            for path in source_files(".py", under=folder)
            for i, line in enumerate(path.read_text("utf-8").splitlines(), 1) if pattern.search(line)]


def test_no_reader_restates_a_knob_default():
    """Issue 19 item 4: config travels as the model past ``defaults()``; ``max_batch_size``'s default was
    restated in harness/profiling.py and harness/labs/embedded.py."""
    assert _restated_defaults() == []


def test_config_travels_as_the_model():
    from perfwarden.orchestrator.lab_spec import run_base_config
    from perfwarden.orchestrator.settings import RunSettings

    lab = EmbeddedLab(base_overrides={"max_batch_size": 4})
    base = run_base_config(lab, RunSettings(base_config={"dtype": "bfloat16"}))
    assert isinstance(base, EmbeddedConfig) and (base.max_batch_size, base.dtype) == (4, "bfloat16")
    assert EmbeddedConfig.of(base) is base and EmbeddedConfig.of({}) == EmbeddedConfig()
    assert lab.quality_config(EmbeddedConfig(max_batch_size=16)).max_batch_size == 16
    assert lab.quality_config(EmbeddedConfig()).max_batch_size == 8  # at least 8 (the default is 1)
    assert lab.quality_config(EmbeddedConfig(dtype="bfloat16")).dtype == "bfloat16"  # its other knobs kept
    with pytest.raises(ConfigError, match="max_batch_size"):
        EmbeddedConfig.of({"max_batch_size": 0})
    assert EmbeddedConfig.knob_value({}, "weights") == EmbeddedConfig().weights
    with pytest.raises(ConfigError, match="unknown knob"):
        EmbeddedConfig.knob_value({}, "no_such_knob")
