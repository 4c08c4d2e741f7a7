"""Validation of agent trees when a Runner is built (D13)."""

from __future__ import annotations

from typing import Any

from relaykit.errors import ConfigurationError

__all__ = ["unwrap_layers", "validate_tree"]


def unwrap_layers(agent: Any) -> list[Any]:
    """The wrapper layers of one agent, outermost first (flow agents, transfer wrappers...)."""
    layers = [agent]
    inner = getattr(agent, "agent", None)
    while inner is not None and getattr(inner, "name", None) == agent.name:
        layers.append(inner)
        inner = getattr(inner, "agent", None)
    return layers


def validate_tree(root: Any) -> None:
    """Reject duplicate names, shared agent objects, a child named like the root, a tree that
    contains itself, and cycles made only of deterministic transfers."""
    names: dict[str, Any] = {}
    objects: set[int] = set()
    transfers: dict[str, list[str]] = {}

    def visit(agent: Any, path: tuple[int, ...], depth: int) -> None:
        layers = unwrap_layers(agent)
        for layer in layers:
            if id(layer) in path:
                raise ConfigurationError(
                    f"the agent tree contains itself: {agent.name!r} is its own descendant")
            if id(layer) in objects:
                raise ConfigurationError(
                    f"agent {agent.name!r} appears twice in the tree (the same agent object "
                    "listed twice, or given two parents); build a separate agent for each place")
        objects.update(id(layer) for layer in layers)
        name = agent.name
        if depth > 0 and name == root.name:
            raise ConfigurationError(
                f"agent {name!r} has the same name as the root agent; names must be unique")
        if name in names:
            raise ConfigurationError(
                f"duplicate agent name {name!r} in the tree; names must be unique in one tree")
        names[name] = agent
        for layer in layers:
            targets = getattr(layer, "to_agent_names", None)
            if targets:
                transfers.setdefault(name, []).extend(targets)
        here = (*path, *(id(layer) for layer in layers))
        children: dict[int, Any] = {}
        for layer in layers:
            for sub in getattr(layer, "sub_agents", None) or ():
                children.setdefault(id(sub), sub)
        for sub in children.values():
            visit(sub, here, depth + 1)

    visit(root, (), 0)
    _check_transfer_cycles(transfers)


def _check_transfer_cycles(edges: dict[str, list[str]]) -> None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def dfs(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                cycle = [*trail[trail.index(nxt):], nxt] if nxt in trail else [node, nxt]
                raise ConfigurationError(
                    "deterministic transfers form a cycle: " + " -> ".join(cycle))
            if nxt not in state:
                dfs(nxt, [*trail, nxt])
        state[node] = 2

    for start in list(edges):
        if start not in state:
            dfs(start, [start])
