"""The Runner's construction checks and its Eino-mode plugin lifecycle (``relaykit.runner``
keeps the entry points and the drive)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from relaykit._aio import closing
from relaykit._claims import claim_ttl
from relaykit._tree import unwrap_layers, validate_tree
from relaykit.agent import Agent
from relaykit.compaction import CompactionConfig
from relaykit.errors import ConfigurationError, PluginError
from relaykit.events import AgentEvent, AgentOutput, RunStep
from relaykit.flow import USER_AUTHOR
from relaykit.messages import Message
from relaykit.plugins import InvocationContext, PluginManager
from relaykit.sessions.base import SessionService, validate_lock_timeout

__all__ = [
    "MAX_SUPPORTED_TRANSFERS",
    "agent_names",
    "check_runner_options",
    "plugin_lifecycle",
]

logger = logging.getLogger("relaykit")
#: The largest ``max_transfers`` a Runner accepts: transfers nest the target's stream inside
#: the transferring agent's, and far more would reach Python's recursion limit.
MAX_SUPPORTED_TRANSFERS = 250


def check_runner_options(
    agent: Agent,
    *,
    checkpoint_store: Any,
    session_service: Any,
    artifact_service: Any,
    compaction: Any,
    save_input_blobs_as_artifacts: bool,
    session_lock_timeout: object,
    max_transfers: object,
) -> float:
    """Check a Runner's options and tree (``ConfigurationError`` naming the problem); the
    session lock timeout in seconds."""
    if compaction is not None and not isinstance(compaction, CompactionConfig):
        raise ConfigurationError(
            f"compaction must be a CompactionConfig, not {type(compaction).__name__}"
        )
    if compaction is not None and session_service is None:
        raise ConfigurationError(
            "compaction needs a session service: Runner(..., session_service=..., compaction=...)"
        )
    if save_input_blobs_as_artifacts and artifact_service is None:
        raise ConfigurationError(
            "save_input_blobs_as_artifacts needs Runner(..., artifact_service=...)"
        )
    try:
        lock_timeout = validate_lock_timeout(session_lock_timeout)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"session_lock_timeout: {exc}") from None
    if session_service is not None and not isinstance(session_service, SessionService):
        raise ConfigurationError(
            f"session_service must implement SessionService, not {type(session_service).__name__}"
        )
    if checkpoint_store is not None:
        missing = [m for m in _STORE_METHODS if not callable(getattr(checkpoint_store, m, None))]
        if missing:
            raise ConfigurationError(
                f"checkpoint store {type(checkpoint_store).__name__} lacks "
                f"{', '.join(missing)}: a CheckpointStore must support exclusive resumes "
                "(claim, renew, release, finish) as well as get, set and delete"
            )
    if checkpoint_store is not None:
        claim_ttl(checkpoint_store)  # a store with an unusable lease fails here, not later
    if (
        not isinstance(max_transfers, int)
        or isinstance(max_transfers, bool)
        or not 0 <= max_transfers <= MAX_SUPPORTED_TRANSFERS
    ):
        raise ConfigurationError(
            f"max_transfers must be an int from 0 to {MAX_SUPPORTED_TRANSFERS}, not "
            f"{max_transfers!r} (each transfer runs the target inside the transferring "
            "agent's stream, so a run cannot nest transfers without bound)"
        )
    validate_tree(agent)
    if session_service is not None and USER_AUTHOR in agent_names(agent):
        raise ConfigurationError(
            f"an agent is named {USER_AUTHOR!r}: in session mode that is the author of the "
            "user's events; rename the agent"
        )
    return lock_timeout


async def plugin_lifecycle(
    plugins: PluginManager,
    root_name: str,
    context: InvocationContext,
    messages: list[Message] | None,
    start: Callable[[], AsyncIterator[AgentEvent]],
    not_started: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[AgentEvent]:
    """The run-level plugin hooks around an Eino-mode run or resume: ``on_user_message``
    (a run's user messages), ``before_run`` (an early answer: the run does not start),
    ``on_event`` on each event, ``after_run`` however it ends. ``not_started`` runs when
    the run never started (a resume releases its checkpoint: the pause stays)."""
    root_step = (RunStep(root_name),)
    started = False
    try:
        try:
            if messages is not None and plugins.has("on_user_message"):
                for i, message in enumerate(messages):
                    if message.role == "user":
                        replaced = await plugins.on_user_message(context, message)
                        if replaced is not None:
                            messages[i] = replaced
            early = await plugins.before_run(context) if plugins.has("before_run") else None
        except PluginError as exc:
            yield AgentEvent(root_name, root_step, error=exc)
            return
        if early is not None:
            events: AsyncIterator[AgentEvent] = _one(
                AgentEvent(root_name, root_step, AgentOutput(early))
            )
        else:
            started = True
            events = start()
        async with closing(events) as stream:
            async for ev in stream:
                if plugins.has("on_event"):
                    try:
                        ev = await plugins.on_event(context, ev)
                    except PluginError as exc:
                        ev = AgentEvent(ev.agent_name, ev.run_path, error=exc)
                yield ev
    finally:
        if not started and not_started is not None:
            await not_started()
        if plugins.has("after_run"):
            try:
                await asyncio.wait_for(asyncio.shield(plugins.after_run(context)), 5.0)
            except Exception as exc:
                logger.warning("after_run failed: %s", exc)


_STORE_METHODS = ("get", "set", "delete", "claim", "renew", "release", "finish")


async def _one(event: AgentEvent) -> AsyncIterator[AgentEvent]:
    yield event


def agent_names(root: Agent) -> set[str]:
    """The names of every agent of the tree (wrappers and workflows included)."""
    names: set[str] = set()
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        agent = stack.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        name = getattr(agent, "name", None)
        if isinstance(name, str):
            names.add(name)
        for layer in unwrap_layers(agent):
            stack.extend(getattr(layer, "sub_agents", None) or ())
    return names
