"""A small support desk for the CLI tests, offline on ScriptedModel.

``triage`` hands order questions to ``orders`` (tool ``lookup_order``) and refunds to
``refunds``, whose ``issue_refund`` asks a human first (a core interrupt) and whose
``ask_manager`` is a long-running tool (the answer comes back as its result). The scripts are
functions of the request, so the module can serve any number of runs.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable

import relaykit as rk
from relaykit import Message, ModelRequest, ToolCall

APP_NAME = "desk"


@rk.tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order number
    """
    return {"order_id": order_id, "status": "shipped"}


@rk.tool
def issue_refund(ctx: rk.ToolContext, order_id: str) -> str:
    """Refund an order; a human approves every refund."""
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt({"question": f"Refund order {order_id}?"})
    return "refunded" if ctx.resume_data in ("yes", True) else "declined"


@rk.tool(long_running=True)
def ask_manager(order_id: str) -> str:
    """Ask a manager about an order; the answer comes later."""
    return f"ticket M-{order_id}"


def _user_text(request: ModelRequest) -> str:
    return next(
        m.content
        for m in reversed(request.messages)
        if m.role == "user" and not m.content.startswith("For context:")
    )


def _order(request: ModelRequest) -> str:
    found = re.findall(r"\d+", _user_text(request))
    return found[-1] if found else "0"


def _call(name: str, **arguments: str) -> Message:
    return Message.assistant("", [ToolCall(f"call_{name}", name, json.dumps(arguments))])


def triage(request: ModelRequest) -> Message:
    text = _user_text(request).lower()
    target = "refunds" if "refund" in text or "manager" in text else "orders"
    return _call("transfer_to_agent", agent_name=target)


def orders(request: ModelRequest) -> Message:
    last = request.messages[-1]
    if last.role == "tool" and last.tool_name == "lookup_order":
        order = json.loads(last.content)
        return Message.assistant(f"Order {order['order_id']} has {order['status']}.")
    return _call("lookup_order", order_id=_order(request))


def refunds(request: ModelRequest) -> Message:
    last = request.messages[-1]
    if last.role == "tool" and last.tool_name == "issue_refund":
        return Message.assistant(f"The refund was {last.content}.")
    if last.role == "tool" and last.tool_name == "ask_manager":
        return Message.assistant(f"The manager said: {last.content}")
    if "manager" in _user_text(request).lower():
        return _call("ask_manager", order_id=_order(request))
    return _call("issue_refund", order_id=_order(request))


def _model(script: Callable[[ModelRequest], Message]) -> rk.ScriptedModel:
    return rk.ScriptedModel(itertools.repeat(script), record_requests=False)


def build() -> rk.FlowAgent:
    """The agent tree."""
    return rk.set_sub_agents(
        rk.ChatModelAgent("triage", "Routes customers.", "Route.", model=_model(triage)),
        [
            rk.ChatModelAgent(
                "orders",
                "Answers order questions.",
                "Answer.",
                model=_model(orders),
                tools=[lookup_order],
            ),
            rk.ChatModelAgent(
                "refunds",
                "Handles refunds.",
                "Refund.",
                model=_model(refunds),
                tools=[issue_refund, ask_manager],
            ),
        ],
    )


root_agent = build()

#: A second agent, for ``chat_app.py:solo``.
solo = rk.ChatModelAgent(
    "solo", "Says hello.", "Greet.", model=_model(lambda r: Message.assistant("Hello!"))
)


def make_runner(*, session_service: rk.SessionService, model: str | None = None) -> rk.Runner:
    """The app's Runner (``--model`` would pick a real model for every agent)."""
    return rk.Runner(build(), app_name=APP_NAME, session_service=session_service, streaming=True)
