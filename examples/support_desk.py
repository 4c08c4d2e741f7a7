"""A customer-support desk: a triage agent routes to order and refund specialists.

The supervisor pattern: every specialist hands control back to triage when it is done. The
refund tool needs a human's approval: the run pauses (an interrupt, saved as a checkpoint) and
a *fresh* Runner — as a new process would — resumes it from the checkpoint with the decision.
Runs offline on ScriptedModel; pass a provider string (``openai:gpt-4o-mini``) for a real model.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator

import relaykit as rk
from relaykit import Message, ModelRequest, ToolCall

ORDERS = {"1234": {"status": "shipped", "carrier": "DHL", "eta": "Thursday", "total": 59.90}}


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
def issue_refund(ctx: rk.ToolContext, order_id: str, amount: float) -> str:
    """Refund an order. A human must approve every refund.

    Args:
        order_id: the order number
        amount: the amount to refund, in euros
    """
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt(
            {
                "question": f"Approve a refund of €{amount:.2f} for order {order_id}?",
                "order_id": order_id,
                "amount": amount,
            }
        )
    decision = ctx.resume_data or {}
    if not decision.get("approved"):
        return f"refund of €{amount:.2f} for order {order_id} was declined by {decision.get('by')}"
    return f"refund of €{amount:.2f} for order {order_id} approved by {decision.get('by')}"


# -- scripted models: what a real LLM would answer, as functions of the request ------------
def _last(request: ModelRequest) -> Message:
    return request.messages[-1]


def _user_text(request: ModelRequest) -> str:
    return next(
        m.content
        for m in reversed(request.messages)
        if m.role == "user" and not m.content.startswith("For context:")
    )


def _order_id(text: str) -> str:
    match = re.search(r"\d{3,}", text)
    return match.group(0) if match else "0"


def _call(name: str, arguments: dict[str, object], n: int) -> Message:
    return Message.assistant("", [ToolCall(f"call_{name}_{n}", name, json.dumps(arguments))])


def triage_script(request: ModelRequest, n: int) -> Message:
    last = _last(request)
    if last.role == "user" and last.content.startswith("For context:"):
        return Message.assistant("Is there anything else I can help you with?")
    dest = "refunds" if "refund" in _user_text(request).lower() else "orders"
    return _call("transfer_to_agent", {"agent_name": dest}, n)


def orders_script(request: ModelRequest, n: int) -> Message:
    last = _last(request)
    if last.role == "tool":
        order = json.loads(last.content)
        return Message.assistant(
            f"Order {order['order_id']} has {order['status']} with "
            f"{order['carrier']}; it arrives {order['eta']}."
        )
    return _call("lookup_order", {"order_id": _order_id(_user_text(request))}, n)


def refunds_script(request: ModelRequest, n: int) -> Message:
    last = _last(request)
    if last.role == "tool" and last.tool_name == "issue_refund":
        return Message.assistant(f"Done: {last.content}.")
    if last.role == "tool":
        total = json.loads(last.content)["total"]
        return _call(
            "issue_refund", {"order_id": _order_id(_user_text(request)), "amount": total}, n
        )
    return _call("lookup_order", {"order_id": _order_id(_user_text(request))}, n)


def scripted(script: Callable[[ModelRequest, int], Message]) -> rk.ScriptedModel:
    counter = itertools.count()

    def responses() -> Iterator[Callable[[ModelRequest], Message]]:
        while True:
            yield lambda request: script(request, next(counter))

    return rk.ScriptedModel(responses())


def build_desk(model: str | None = None) -> rk.FlowAgent:
    """The agent tree. ``model`` is a provider string; None = scripted (offline)."""

    def pick(script: Callable[[ModelRequest, int], Message]) -> rk.ChatModel:
        return rk.models.from_string(model) if model else scripted(script)

    triage = rk.ChatModelAgent(
        "triage",
        "Front desk: greets customers and routes them.",
        "You are the front desk of an online shop. Route order questions to 'orders' and "
        "refund requests to 'refunds'. When a specialist has answered, ask if there is "
        "anything else.",
        model=pick(triage_script),
    )
    orders = rk.ChatModelAgent(
        "orders",
        "Answers questions about orders: status, delivery, contents.",
        "You answer questions about orders. Look orders up with lookup_order.",
        model=pick(orders_script),
        tools=[lookup_order],
    )
    refunds = rk.ChatModelAgent(
        "refunds",
        "Handles refund requests.",
        "You handle refunds. Look the order up, then refund its total with issue_refund.",
        model=pick(refunds_script),
        tools=[lookup_order, issue_refund],
    )
    return rk.Supervisor(triage, [orders, refunds])
