"""D13 / D23: tree validation walks iteratively and limits the depth of a tree — never
RecursionError, however deep the tree or long the transfer chains."""

from __future__ import annotations

import sys

import pytest

import relaykit as rk
from relaykit._tree import MAX_TREE_DEPTH, unwrap_layers, validate_tree
from relaykit.errors import ConfigurationError
from tests.conformance.helpers import ScriptedAgent

DEPTH = 5_000  # several times the default recursion limit
assert sys.getrecursionlimit() < DEPTH


def _chain(depth: int) -> rk.FlowAgent:
    """``a0 -> a1 -> ... -> a<depth-1>``, each the only child of the one before (built from
    the bottom up, so that no builder recurses either)."""
    node: rk.Agent = ScriptedAgent(f"a{depth - 1}")
    for i in range(depth - 2, -1, -1):
        node = rk.set_sub_agents(ScriptedAgent(f"a{i}"), [node])
    assert isinstance(node, rk.FlowAgent)
    return node


def test_a_5000_deep_chain_of_sub_agents_is_refused_with_the_depth_limit() -> None:
    """D23: a 5,000-deep tree is refused with ConfigurationError naming the limit (it could
    not run), not RecursionError."""
    with pytest.raises(
        ConfigurationError,
        match=f"deeper than {MAX_TREE_DEPTH} levels \\(at 'a{MAX_TREE_DEPTH}'\\)",
    ):
        rk.Runner(_chain(DEPTH))


async def test_a_tree_at_the_depth_limit_builds_and_runs() -> None:
    """The deepest accepted tree runs: control is transferred down to the bottom agent."""
    node: rk.Agent = ScriptedAgent(f"a{MAX_TREE_DEPTH - 1}", ["bottom"])
    for i in range(MAX_TREE_DEPTH - 2, -1, -1):
        node = rk.set_sub_agents(
            ScriptedAgent(f"a{i}", [rk.AgentEvent.transfer(f"a{i + 1}")]), [node]
        )
    result = await rk.Runner(node, max_transfers=MAX_TREE_DEPTH).invoke("go")
    assert result.output is not None and result.output.content == "bottom"
    assert len(result.events[-1].run_path) == MAX_TREE_DEPTH


def test_a_duplicate_name_at_the_bottom_of_the_deepest_chain_is_reported() -> None:
    """D13 checks still apply at any depth: the bottom agent named like a middle one."""
    node: rk.Agent = ScriptedAgent("a50")
    for i in range(MAX_TREE_DEPTH - 2, -1, -1):
        node = rk.set_sub_agents(ScriptedAgent(f"a{i}"), [node])
    with pytest.raises(ConfigurationError, match="duplicate agent name 'a50'"):
        rk.Runner(node)


def test_a_deep_chain_that_contains_itself_is_reported() -> None:
    """The bottom agent given the root as its child: "contains itself", not a hang."""
    root = _chain(MAX_TREE_DEPTH)
    bottom = root
    while bottom.sub_agents:
        bottom = bottom.sub_agents[0]
    rk.set_sub_agents(bottom, [root])
    with pytest.raises(
        ConfigurationError, match="the agent tree contains itself: 'a0' is its own descendant"
    ):
        rk.Runner(root)


def test_a_5000_long_deterministic_transfer_cycle_is_detected() -> None:
    """D13 / D23: w0 -> w1 -> ... -> w4999 -> w0, made only of deterministic transfers; the
    error names the whole cycle in order."""
    workers = [
        rk.with_deterministic_transfer(ScriptedAgent(f"w{i}"), [f"w{(i + 1) % DEPTH}"])
        for i in range(DEPTH)
    ]
    root = rk.set_sub_agents(ScriptedAgent("root"), workers)
    with pytest.raises(ConfigurationError) as caught:
        rk.Runner(root)
    expected = " -> ".join([*(f"w{i}" for i in range(DEPTH)), "w0"])
    assert str(caught.value) == f"deterministic transfers form a cycle: {expected}"


def test_a_5000_long_acyclic_transfer_chain_is_accepted() -> None:
    """A long chain that ends (w4999 transfers to nobody) is no cycle."""
    workers = [
        rk.with_deterministic_transfer(ScriptedAgent(f"w{i}"), [f"w{i + 1}"])
        for i in range(DEPTH - 1)
    ]
    rk.Runner(rk.set_sub_agents(ScriptedAgent("root"), [*workers, ScriptedAgent(f"w{DEPTH - 1}")]))


def test_a_cycle_reached_from_a_side_branch_names_only_the_cycle() -> None:
    """The search starts at X (not on the cycle); the message names Y -> Z -> Y only."""
    root = rk.set_sub_agents(
        ScriptedAgent("R"),
        [
            rk.with_deterministic_transfer(ScriptedAgent("X"), ["Y"]),
            rk.with_deterministic_transfer(ScriptedAgent("Y"), ["Z"]),
            rk.with_deterministic_transfer(ScriptedAgent("Z"), ["Y"]),
        ],
    )
    with pytest.raises(
        ConfigurationError, match=r"^deterministic transfers form a cycle: Y -> Z -> Y$"
    ):
        validate_tree(root)


def test_two_transfers_into_one_agent_are_no_cycle() -> None:
    """A diamond (X -> Y, X -> Z, Y -> Z): Z is reached twice but there is no cycle."""
    validate_tree(
        rk.set_sub_agents(
            ScriptedAgent("R"),
            [
                rk.with_deterministic_transfer(ScriptedAgent("X"), ["Y", "Z"]),
                rk.with_deterministic_transfer(ScriptedAgent("Y"), ["Z"]),
                ScriptedAgent("Z"),
            ],
        )
    )


def test_an_agent_listed_twice_under_one_parent_is_reported() -> None:
    """The same agent object twice in one sub-agent list: it appears twice in the tree."""
    shared = ScriptedAgent("S")
    parent = rk.as_flow_agent(ScriptedAgent("P"))
    child = rk.as_flow_agent(shared)
    parent.sub_agents = [child, child]
    with pytest.raises(ConfigurationError, match="agent 'S' appears twice in the tree"):
        validate_tree(parent)


def test_a_wrapper_whose_agent_chain_loops_is_reported_not_walked_forever() -> None:
    """D23: ``unwrap_layers`` follows ``.agent`` while the name stays the same; a layer that
    leads back to itself is a ConfigurationError instead of an endless loop."""

    class SelfWrapping:
        name = "loopy"
        description = "wraps itself"

        def __init__(self) -> None:
            self.agent = self

    with pytest.raises(ConfigurationError, match="agent 'loopy' wraps itself"):
        unwrap_layers(SelfWrapping())
