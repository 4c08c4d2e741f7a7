"""Validation of agent trees when a Runner is built (D13).

Every walk here is iterative (D23): a tree or a chain of transfers of any depth is checked
without ``RecursionError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from relaykit.errors import ConfigurationError

__all__ = ["MAX_TREE_DEPTH", "unwrap_layers", "validate_tree"]


def unwrap_layers(agent: Any) -> list[Any]:
    """The wrapper layers of one agent, outermost first (flow agents, transfer wrappers...).

    >>> worker = as_flow_agent(with_deterministic_transfer(chat_agent, ["boss"]))  # doctest: +SKIP
    >>> [type(layer).__name__ for layer in unwrap_layers(worker)]  # doctest: +SKIP
    ['FlowAgent', '_DeterministicTransfer', 'ChatModelAgent']
    """
    layers = [agent]
    seen = {id(agent)}
    inner = getattr(agent, "agent", None)
    while inner is not None and getattr(inner, "name", None) == agent.name:
        if id(inner) in seen:  # a wrapper that wraps itself would make this loop endless
            raise ConfigurationError(
                f"agent {agent.name!r} wraps itself: its .agent chain leads back to one of its "
                "own layers; wrap each agent object once"
            )
        seen.add(id(inner))
        layers.append(inner)
        inner = getattr(inner, "agent", None)
    return layers


#: The deepest agent tree a Runner accepts (the root is level 1). Every level nests its
#: agent's event stream inside its parent's, as does every transfer (``max_transfers``, at
#: most 250): together they stay well inside Python's recursion limit.
MAX_TREE_DEPTH = 100


def validate_tree(root: Any) -> None:
    """Reject duplicate names, shared agent objects, a child named like the root, a tree that
    contains itself, and cycles made only of deterministic transfers (``ConfigurationError``).

    >>> validate_tree(set_sub_agents(triage, [orders, refunds]))  # doctest: +SKIP
    """
    names: dict[str, Any] = {}
    objects: set[int] = set()  # every layer seen so far
    on_path: set[int] = set()  # the layers of the agents from the root down to this one
    transfers: dict[str, list[str]] = {}
    # Depth first, children in order (the order decides which error is reported). An entry
    # is an agent to visit, or (None, ids): its subtree is done, take its layers off the path.
    stack: list[tuple[Any, tuple[int, ...], int]] = [(root, (), 1)]
    while stack:
        agent, leaving, depth = stack.pop()
        if agent is None:
            on_path.difference_update(leaving)
            continue
        layers = unwrap_layers(agent)
        ids = tuple(id(layer) for layer in layers)
        for layer_id in ids:
            if layer_id in on_path:
                raise ConfigurationError(
                    f"the agent tree contains itself: {agent.name!r} is its own descendant"
                )
            if layer_id in objects:
                raise _appears_twice(agent.name)
        if depth > MAX_TREE_DEPTH:
            raise ConfigurationError(
                f"the agent tree is deeper than {MAX_TREE_DEPTH} levels (at {agent.name!r}): "
                "every level runs inside its parent's event stream, and a tree this deep "
                "would reach Python's recursion limit; flatten it"
            )
        objects.update(ids)
        name = agent.name
        if agent is not root and name == root.name:
            raise ConfigurationError(
                f"agent {name!r} has the same name as the root agent; names must be unique"
            )
        if name in names:
            raise ConfigurationError(
                f"duplicate agent name {name!r} in the tree; names must be unique in one tree"
            )
        names[name] = agent
        for layer in layers:
            targets = getattr(layer, "to_agent_names", None)
            if targets:
                transfers.setdefault(name, []).extend(targets)
        # Layers may share their children (a workflow and its flow agent list the same
        # ones): merged across layers; within one layer's list, an object twice is an error.
        children: dict[int, Any] = {}
        for layer in layers:
            listed: set[int] = set()
            for sub in getattr(layer, "sub_agents", None) or ():
                if id(sub) in listed:
                    raise _appears_twice(sub.name)
                listed.add(id(sub))
                children.setdefault(id(sub), sub)
        on_path.update(ids)
        stack.append((None, ids, depth))
        stack.extend((sub, (), depth + 1) for sub in reversed(children.values()))
    _check_transfer_cycles(transfers)


def _appears_twice(name: str) -> ConfigurationError:
    return ConfigurationError(
        f"agent {name!r} appears twice in the tree (the same agent object listed twice, or "
        "given two parents); build a separate agent for each place"
    )


def _check_transfer_cycles(edges: dict[str, list[str]]) -> None:
    """Depth-first search over the deterministic transfers; a cycle is reported as the names
    along it (``X -> Y -> X``)."""
    done: set[str] = set()
    for start in edges:
        if start in done:
            continue
        # ``trail`` is the search path from ``start``; ``on_trail`` is its set, for lookups.
        trail = [start]
        on_trail = {start}
        frames: list[Iterator[str]] = [iter(edges[start])]
        while frames:
            nxt = next(frames[-1], None)
            if nxt is None:  # every target of trail[-1] is checked
                frames.pop()
                node = trail.pop()
                on_trail.discard(node)
                done.add(node)
                continue
            if nxt in on_trail:
                cycle = [*trail[trail.index(nxt) :], nxt]
                raise ConfigurationError(
                    "deterministic transfers form a cycle: " + " -> ".join(cycle)
                )
            if nxt not in done:
                trail.append(nxt)
                on_trail.add(nxt)
                frames.append(iter(edges.get(nxt, ())))
