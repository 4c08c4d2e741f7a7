"""What the agents of one Runner invocation can reach beyond their tree: plugins and services.

The Runner puts an ``Invocation`` on ``RunOptions.invocation`` when it has plugins or services;
flow agents, chat agents and tools read it there (``None``: nothing to call, the fast path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from relaykit.plugins import InvocationContext, PluginManager

if TYPE_CHECKING:
    from relaykit.artifacts.base import ArtifactService
    from relaykit.memory import MemoryService

__all__ = ["Invocation"]


@dataclass(slots=True)
class Invocation:
    """The plugins and services of one invocation (one ``run`` or ``resume`` call).

    >>> inv = Invocation(InvocationContext("shop", None, None, "inv-1"), PluginManager([]))
    >>> inv.context.invocation_id, bool(inv.plugins), inv.artifact_service is None
    ('inv-1', False, True)
    """

    #: What hooks receive: the app, user, session and invocation ids, the session.
    context: InvocationContext
    #: The Runner's plugins (empty when it has none).
    plugins: PluginManager
    #: Where ``ToolContext.save_artifact`` / ``load_artifact`` go (session mode), or None.
    artifact_service: ArtifactService | None = None
    #: What ``ToolContext.search_memory`` and ``load_memory`` search, or None.
    memory_service: MemoryService | None = None
    #: Session mode: ``Session`` of the turn (``Any``: the service's own type), else None.
    session: Any = None
