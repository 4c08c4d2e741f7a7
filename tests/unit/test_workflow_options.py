"""Workflow options are keyword-only; a sequential or parallel workflow has no max_iterations."""

from __future__ import annotations

import pytest

import relaykit as rk
from tests.conformance.helpers import ScriptedAgent


def test_loop_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        rk.LoopAgent("L", [ScriptedAgent("A")], 3)  # type: ignore[misc]
    loop = rk.LoopAgent("L", [ScriptedAgent("A")], max_iterations=3, description="refines")
    assert loop.max_iterations == 3 and loop.description == "refines"


@pytest.mark.parametrize("cls", [rk.SequentialAgent, rk.ParallelAgent])
def test_sequential_and_parallel_refuse_max_iterations(cls: type[rk.SequentialAgent]) -> None:
    with pytest.raises(TypeError):
        cls("W", [ScriptedAgent("A")], max_iterations=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cls("W", [ScriptedAgent("A")], "a description")  # type: ignore[misc]
    assert cls("W", [ScriptedAgent("A")], description="d").description == "d"


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_loop_max_iterations_is_validated(bad: object) -> None:
    with pytest.raises(rk.errors.ConfigurationError, match="max_iterations must be an int"):
        rk.LoopAgent("L", [ScriptedAgent("A")], max_iterations=bad)  # type: ignore[arg-type]
