"""The plugins' model and tool hooks as a ``ChatModelAgent`` runs them (D25).

* ``before_model`` returning a message: that message is the model's reply, the model is not
  called and ``after_model`` does not run for it. ``after_model`` sees the complete reply and
  may replace it; while any plugin overrides it, replies are not streamed (the agent calls
  ``generate``). A hook that raises is the model call failing.
* ``before_tool`` returning a value: that value is the tool's result and the tool does not
  run; ``after_tool`` sees every result (a ``before_tool`` value too) and may replace it. A
  hook raising ``ToolError`` sends ``error: ...`` back to the model (D15); any other failure
  is the tool failing. The tool hooks run for every tool call the agent executes (``exit``
  and ``exit_loop`` included), except the synthetic ``transfer_to_agent``; calls refused
  before they run (unknown tool, bad arguments) reach no hook. On a resume, a call that
  interrupted runs again without ``before_tool`` (it ran when the call started);
  ``after_tool`` runs when it completes.

>>> import asyncio
>>> from relaykit._invocation import Invocation
>>> from relaykit.models.scripted import ScriptedModel
>>> from relaykit.plugins import InvocationContext, Plugin, PluginManager
>>> class Polite(Plugin):
...     async def after_model(self, ctx, agent_name, response):
...         return Message.assistant(response.content + " Kind regards.")
>>> inv = Invocation(InvocationContext("shop", "ada", "s1", "inv-1"), PluginManager([Polite()]))
>>> model = ScriptedModel([Message.assistant("Done.")])
>>> asyncio.run(model_reply(inv, "helper", model, ModelRequest([]))).content
'Done. Kind regards.'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from relaykit._agent_hooks import checked_message
from relaykit.agents._tool_calls import ChatModelAgentState, with_unique_call_ids
from relaykit.errors import ConfigurationError, PluginError, ToolError
from relaykit.messages import Message, ToolCall
from relaykit.models.base import ChatModel, ModelRequest
from relaykit.options import HistoryModifier
from relaykit.resume import ResumeInfo
from relaykit.tools.base import Tool, ToolContext
from relaykit.tools.function import ToolInterrupt

if TYPE_CHECKING:
    from relaykit._invocation import Invocation

__all__ = ["call_tool", "model_reply", "modify_history"]


async def model_reply(
    inv: Invocation, agent_name: str, model: ChatModel, request: ModelRequest
) -> Message | None:
    """The reply the plugins settle for one model call: a ``before_model`` message, or the
    model's reply (from ``generate``) as ``after_model`` leaves it -- with unique tool-call ids
    (D24). None when no hook takes part: the agent calls its model as usual (streaming or not).

    Args:
        inv: the invocation (its plugins and context).
        agent_name: the agent calling its model.
        model: the agent's model.
        request: the request (a ``before_model`` hook may change it in place).

    Raises:
        PluginError: a hook raised, or returned something other than a message.
    """
    plugins, ctx = inv.plugins, inv.context
    if plugins.has("before_model"):
        answer = checked_message(
            "before_model", agent_name, await plugins.before_model(ctx, agent_name, request)
        )
        if answer is not None:
            return with_unique_call_ids(answer)
    if not plugins.has("after_model"):
        return None
    reply = with_unique_call_ids(await model.generate(request))
    replaced = checked_message(
        "after_model", agent_name, await plugins.after_model(ctx, agent_name, reply)
    )
    return with_unique_call_ids(replaced) if replaced is not None else reply


def modify_history(
    agent_name: str,
    modifier: HistoryModifier,
    messages: list[Message],
    paused: ChatModelAgentState | None,
) -> None:
    """Apply a run's ``history_modifier`` to an agent's conversation ``messages`` (in place).

    On a resume (``paused``), the conversation ends with the model reply whose tool calls
    were paused; the modifier may change their names and arguments (the calls then continue
    as changed) but must keep the reply last, with the same call ids in the same order.

    >>> call = ToolCall("c1", "pay", '{"amount": 500}')
    >>> state = ChatModelAgentState([Message.assistant("", [call])], [call])
    >>> def approve(messages):
    ...     approved = ToolCall("c1", "pay", '{"amount": 50}')
    ...     return [*messages[:-1], Message.assistant("", [approved])]
    >>> modify_history("payer", approve, state.messages, state)
    >>> state.calls[0].arguments, state.messages[-1].tool_calls[0].arguments
    ('{"amount": 50}', '{"amount": 50}')

    Raises:
        ConfigurationError: the modifier returned something other than a list of messages,
            or changed the paused calls' ids.
    """
    changed = modifier(list(messages))
    if not isinstance(changed, list) or not all(isinstance(m, Message) for m in changed):
        raise ConfigurationError(
            f"agent {agent_name!r}: history_modifier must return a list of relaykit.Message, "
            f"not {type(changed).__name__}"
        )
    if paused is not None:
        ids = [call.id for call in paused.calls]
        last = changed[-1] if changed else None
        if last is None or last.role != "assistant" or [c.id for c in last.tool_calls] != ids:
            raise ConfigurationError(
                f"agent {agent_name!r}: on a resume, history_modifier must keep the paused "
                f"model reply last, with its tool calls {ids} (same ids, same order); change "
                "their arguments, not their ids"
            )
        paused.calls = list(last.tool_calls)
    messages[:] = changed


async def call_tool(
    tool: Tool,
    tctx: ToolContext,
    call: ToolCall,
    arguments: dict[str, Any],
    resume: ResumeInfo | None,
    inv: Invocation | None,
    agent_name: str,
) -> object:
    """Run one tool call (a long-running tool interrupts once started, its result is the
    resume's data), with the tool hooks of ``inv`` around it (None: no hooks).

    Args:
        tool: the tool.
        tctx: the call's context.
        call: the model's call.
        arguments: the parsed arguments (``Any``: decoded JSON values).
        resume: on a resume of this call, what the caller answered; else None.
        inv: the invocation whose ``before_tool`` / ``after_tool`` hooks run, or None.
        agent_name: the agent calling the tool (what the hooks receive).

    Raises:
        ToolInterrupt: the tool paused (or a long-running tool started).
        ToolError: the tool, or a hook, refused the call (goes back to the model, D15).
        PluginError: another failure of a hook (the tool failing).
    """
    long_running = getattr(tool, "long_running", False)
    if long_running and resume is not None and resume.is_resume_target:
        result: object = resume.resume_data
    else:
        result = None
        if inv is not None and resume is None:
            try:
                result = await inv.plugins.before_tool(
                    inv.context, agent_name, call.name, arguments
                )
            except PluginError as exc:
                _reraise(exc)
        if result is None:
            result = await tool.call(tctx, arguments)
            if long_running:
                raise ToolInterrupt(
                    {
                        "tool": call.name,
                        "tool_call_id": call.id,
                        "arguments": arguments,
                        "started": result,
                    }
                )
    if inv is not None:
        try:
            replaced = await inv.plugins.after_tool(
                inv.context, agent_name, call.name, arguments, result
            )
        except PluginError as exc:
            _reraise(exc)
        if replaced is not None:
            result = replaced
    return result


def _reraise(exc: PluginError) -> NoReturn:
    """Raise a hook's ``ToolError`` as a ``ToolError`` (D15: back to the model), any other
    hook failure as the ``PluginError`` (the tool failing)."""
    cause = exc.__cause__
    if isinstance(cause, ToolError):
        raise ToolError(str(cause)) from exc
    raise exc
