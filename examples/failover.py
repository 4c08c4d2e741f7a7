"""Failover: when the primary model is overloaded, a backup model answers.

Run: ``.venv/bin/python -m examples.failover`` (offline, ScriptedModel). With real models, the
list would be ``[rk.models.from_string("openai:gpt-4o"), rk.models.from_string(...)]``.
"""

from __future__ import annotations

import asyncio

import relaykit as rk
from relaykit import Message
from relaykit.errors import ModelError

# The primary fails as a provider adapter does when the server answers HTTP 503.
primary = rk.ScriptedModel(
    [ModelError("openai: HTTP 503 from model 'gpt-4o': overloaded", provider="openai", status=503)],
    name="primary",
)
backup = rk.ScriptedModel([Message.assistant("Paris is the capital of France.")], name="backup")

agent = rk.ChatModelAgent(
    "helper", "Answers questions.", "Answer in one sentence.", rk.FailoverModel([primary, backup])
)


async def main() -> None:
    result = await rk.Runner(agent).invoke("What is the capital of France?")
    reply = result.output
    assert reply is not None
    print(reply.content)
    for attempt in reply.metadata["attempts"]:
        print(f"{attempt['model']}: {attempt['error'] or 'answered'}")


if __name__ == "__main__":
    asyncio.run(main())
