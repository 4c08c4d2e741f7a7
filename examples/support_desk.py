"""A customer-support desk: triage routes to an orders agent and a refunds agent.

The tree is ``triage`` with two sub-agents, ``orders`` and ``refunds``; each may hand control
back to triage (its parent), which routes again. In session mode the next turn starts at the
agent that spoke last, so a follow-up goes straight to the specialist already on the case.

``request_refund`` is a long-running tool: calling it only *starts* the work (it files a request
for a manager's approval) and the invocation pauses; the manager's decision comes back later —
in any process — as the tool's result (``Message.tool(decision, tool_call_id=...)``).

Runs offline on ScriptedModel: the scripts below are what a real LLM would answer, as functions
of the request (they read the history, so they answer follow-ups from earlier turns). Pass a
provider string (``openai:gpt-4o-mini``) for a real model.

It is an app: ``relaykit run examples/support_desk`` chats with it in the terminal (answer the
refund's approval with ``approved by Ana`` or ``no``), ``relaykit tree examples/support_desk``
draws it. ``DESK_PACE=0.5`` makes the scripted models take that many seconds before they
answer and stream their words slowly, as real models do (``make demo`` sets it in a terminal).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator

import relaykit as rk
from relaykit import Message, MessageStream, ModelRequest, ToolCall

APP_NAME = "desk"

ORDERS = {"1234": {"status": "shipped", "carrier": "DHL", "eta": "Thursday", "total": 59.90}}
PARCELS = {"1234": {"tracking": "JD0146000031", "last_seen": "the Leipzig hub, this morning"}}


@rk.tool
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order.

    Args:
        order_id: the order number, digits only
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise rk.ToolError(f"no order {order_id}")
    return {"order_id": order_id, **order}


@rk.tool
def track_parcel(order_id: str) -> dict[str, object]:
    """Track the parcel of a shipped order.

    Args:
        order_id: the order number, digits only
    """
    parcel = PARCELS.get(order_id)
    if parcel is None:
        raise rk.ToolError(f"no parcel for order {order_id}")
    return {"order_id": order_id, **parcel}


@rk.tool(long_running=True)
def request_refund(order_id: str, amount: float, reason: str) -> dict[str, object]:
    """Ask a manager to approve a refund. Only starts the approval: the manager's decision
    comes back later as this call's result.

    Args:
        order_id: the order number
        amount: the amount to refund, in euros
        reason: why the customer wants a refund
    """
    return {"ticket": f"APR-{order_id}", "status": "waiting for a manager", "amount": amount}


# -- scripted models: what a real LLM would answer, as functions of the request ------------
def _is_user_text(message: Message) -> bool:
    return message.role == "user" and not message.content.startswith("For context:")


def _user_text(request: ModelRequest) -> str:
    """The customer's latest message (other agents' messages read as "For context: ...")."""
    return next(m.content for m in reversed(request.messages) if _is_user_text(m))


def _order_id(request: ModelRequest) -> str:
    """The latest order number in the conversation, the earlier turns included."""
    for message in reversed(request.messages):
        texts = [message.content, *(call.arguments for call in message.tool_calls)]
        for text in texts:
            found = re.findall(r"order\D{0,8}?(\d{3,})", text, re.I)
            if not found and _is_user_text(message):  # a bare number: "1234"
                found = re.findall(r"\b(\d{3,})\b", text)
            if found:
                return str(found[-1])
    return "0"


def _failure(message: Message) -> str | None:
    """What went wrong, when a tool's result is its error rather than its JSON result."""
    try:
        json.loads(message.content)
    except ValueError:
        return message.content.removeprefix("error: ")
    return None


def _own_call(request: ModelRequest, name: str) -> dict[str, object] | None:
    """The arguments of this agent's latest call of tool ``name`` in the history."""
    for message in reversed(request.messages):
        for call in message.tool_calls:
            if call.name == name:
                arguments: dict[str, object] = json.loads(call.arguments)
                return arguments
    return None


def _call(name: str, arguments: dict[str, object], n: int, text: str = "") -> Message:
    return Message.assistant(text, [ToolCall(f"call_{name}_{n}", name, json.dumps(arguments))])


def triage_script(request: ModelRequest, n: int) -> Message:
    dest = "refunds" if "refund" in _user_text(request).lower() else "orders"
    return _call("transfer_to_agent", {"agent_name": dest}, n)


def orders_script(request: ModelRequest, n: int) -> Message:
    last = request.messages[-1]
    looked_up = last.role == "tool" and last.tool_name in ("lookup_order", "track_parcel")
    if looked_up and (failure := _failure(last)) is not None:
        return Message.assistant(f"I could not find order {_order_id(request)}: {failure}.")
    if last.role == "tool" and last.tool_name == "lookup_order":
        order = json.loads(last.content)
        return Message.assistant(
            f"Order {order['order_id']} has {order['status']} with {order['carrier']}; "
            f"it arrives {order['eta']}."
        )
    if last.role == "tool" and last.tool_name == "track_parcel":
        parcel = json.loads(last.content)
        return Message.assistant(
            f"Your parcel's DHL tracking number is {parcel['tracking']}; it was last seen at "
            f"{parcel['last_seen']}."
        )
    text = _user_text(request).lower()
    if "refund" in text:
        return _call(
            "transfer_to_agent",
            {"agent_name": "triage"},
            n,
            "Refunds are not my desk: passing you back to the front desk.",
        )
    order_id = _order_id(request)
    if order_id == "0":
        return Message.assistant("Which order is it? Please give me its number.")
    tool = "track_parcel" if "track" in text else "lookup_order"
    return _call(tool, {"order_id": order_id}, n)


def _decision(text: str) -> tuple[bool, str]:
    """The manager's decision, as (approved, by whom): JSON such as ``{"approved": true, "by":
    "Ana"}``, or words such as ``approved by Ana`` or ``no``."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return bool(data.get("approved")), str(data.get("by") or "the manager")
    approved = re.match(r"\s*(no\b|den|decl|rej)", text, re.I) is None
    by = re.search(r"\bby\s+(.+?)\.?\s*$", text, re.I)
    return approved, by.group(1) if by else "the manager"


def refunds_script(request: ModelRequest, n: int) -> Message:
    last = request.messages[-1]
    if last.role == "tool" and last.tool_name == "request_refund":
        approved, by = _decision(last.content)
        asked = _own_call(request, "request_refund") or {}
        if not approved:
            return Message.assistant(f"Sorry: {by} declined the refund.")
        return Message.assistant(
            f"Good news: {by} approved your refund of "
            f"€{asked.get('amount', 0):.2f} for order {asked.get('order_id')}."
        )
    if last.role == "tool" and last.tool_name == "lookup_order":
        failure = _failure(last)
        if failure is not None:
            return Message.assistant(f"I could not find order {_order_id(request)}: {failure}.")
        order = json.loads(last.content)
        return _call(
            "request_refund",
            {"order_id": order["order_id"], "amount": order["total"], "reason": "arrived broken"},
            n,
        )
    if "refund" in _user_text(request).lower():
        order_id = _order_id(request)
        if order_id == "0":
            return Message.assistant("Which order should I refund? Please give me its number.")
        return _call("lookup_order", {"order_id": order_id}, n)
    asked = _own_call(request, "request_refund") or {}
    return Message.assistant(
        f"The €{asked.get('amount', 0):.2f} for order {asked.get('order_id')} goes back to "
        "your card within 5 business days."
    )


def scripted(script: Callable[[ModelRequest, int], Message]) -> rk.ScriptedModel:
    counter = itertools.count()

    def responses() -> Iterator[Callable[[ModelRequest], Message]]:
        while True:
            yield lambda request: script(request, next(counter))

    return rk.ScriptedModel(responses(), record_requests=False)


class Paced:
    """A model that takes ``pace`` seconds before it answers, then streams word by word."""

    def __init__(self, model: rk.ChatModel, pace: float) -> None:
        self.model = model
        self.pace = pace

    async def generate(self, request: ModelRequest) -> Message:
        await asyncio.sleep(self.pace)
        return await self.model.generate(request)

    def stream(self, request: ModelRequest) -> MessageStream:
        return MessageStream(self._chunks(request))

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        await asyncio.sleep(self.pace)
        async for chunk in self.model.stream(request):
            yield chunk
            await asyncio.sleep(self.pace / 10)


def build_desk(model: str | None = None, *, pace: float = 0.0) -> rk.FlowAgent:
    """The agent tree. ``model`` is a provider string; None = scripted (offline), each model
    taking ``pace`` seconds to answer."""

    def pick(script: Callable[[ModelRequest, int], Message]) -> rk.ChatModel:
        if model:
            return rk.models.from_string(model)
        return Paced(scripted(script), pace) if pace > 0 else scripted(script)

    triage = rk.ChatModelAgent(
        "triage",
        "Front desk: greets customers and routes them.",
        "You are the front desk of an online shop. Route order questions (status, delivery, "
        "tracking) to 'orders' and refund requests to 'refunds'.",
        model=pick(triage_script),
    )
    orders = rk.ChatModelAgent(
        "orders",
        "Answers questions about orders: status, delivery, tracking.",
        "You answer questions about orders. Look orders up with lookup_order and parcels with "
        "track_parcel; the order number may be in earlier messages. For anything else, such "
        "as refunds, transfer back to 'triage'.",
        model=pick(orders_script),
        tools=[lookup_order, track_parcel],
    )
    refunds = rk.ChatModelAgent(
        "refunds",
        "Handles refund requests.",
        "You handle refunds. Look the order up (the order number may be in earlier messages), "
        "then ask for a refund of its total with request_refund: a manager decides, and the "
        "decision comes back as the tool's result. Tell the customer the outcome.",
        model=pick(refunds_script),
        tools=[lookup_order, request_refund],
    )
    return rk.set_sub_agents(triage, [orders, refunds])


#: The app's root agent: ``relaykit run examples/support_desk`` chats with it offline.
root_agent = build_desk(pace=float(os.environ.get("DESK_PACE") or 0))


def make_runner(*, session_service: rk.SessionService, model: str | None = None) -> rk.Runner:
    """The Runner ``relaykit run`` / ``relaykit api`` use: ``--model`` picks a provider."""
    desk = root_agent if model is None else build_desk(model)
    return rk.Runner(desk, app_name=APP_NAME, session_service=session_service, streaming=True)
