"""The graph routes on typed fields and names each node after its function (issue 19 item 4).

Before: ``fix_action`` was a plain string, so a revived checkpoint holding any string passed the state check
and ``route_fix`` sent whatever it did not know to ``integrator`` (a re-measure) by default; and the nodes
``op_benchmarker`` and ``integrator`` ran functions named ``bench`` and ``integrate``."""

from __future__ import annotations

import typing

import pytest

from perfwarden.agents.base import FixAction, FixDecision
from perfwarden.orchestrator import graph
from perfwarden.orchestrator.checkpoint_serde import CheckpointTypeError, check_state
from perfwarden.orchestrator.state import FixStep, RunState


def test_every_node_is_named_after_its_function():
    nodes = graph.build_graph().nodes
    assert set(nodes) == {fn.__name__ for fn in graph.NODES}
    for name, spec in nodes.items():
        assert spec.runnable.func.__name__ == name
        assert getattr(graph, name) is spec.runnable.func


def test_fix_action_is_a_literal_on_the_state_and_every_value_has_a_route():
    hint = typing.get_type_hints(RunState)["fix_action"]
    assert set(typing.get_args(hint)) == {FixStep, type(None)}
    values = set(typing.get_args(FixStep))
    assert values == set(typing.get_args(FixAction)) | {"done"}
    assert typing.get_args(FixDecision.model_fields["action"].annotation) == typing.get_args(FixAction)
    assert set(graph.FIX_ROUTES) == values
    ends = graph.build_graph().branches["fix"]["route_fix"].ends
    for value in values:
        assert graph.route_fix({"fix_action": value}) in ends


def test_a_checkpoint_with_an_unknown_fix_action_is_refused_not_routed_by_default():
    check_state({"fix_action": "remeasure"}, now=0.0)
    with pytest.raises(CheckpointTypeError, match="fix_action"):
        check_state({"fix_action": "make_it_pass"}, now=0.0)
    with pytest.raises(KeyError):
        graph.route_fix({"fix_action": "make_it_pass"})
