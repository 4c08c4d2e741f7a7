"""Unit tests: a typed user program type-checks under ``mypy --strict``, and what it sees is
free of ``Any``.

The program uses the surface most applications touch -- ``Runner.invoke`` / ``invoke_resume``,
``@rk.tool`` (sync and async, with ``rk.ToolContext``), ``ChatModelAgent`` with a
``ScriptedModel``, ``SequentialAgent`` and a custom ``BaseAgent`` with a typed ``run`` -- and
``reveal_type``s the values it works with. A second file misuses the same API: each marked line
must be an error, so the types are not merely permissive. The program also runs, so it is a real
one.

mypy keeps its cache in the repository's ``.mypy_cache`` (as ``test_tool_typing`` and
``make typecheck`` do): a fresh clone pays for one cold run (about 25 s: mypy follows relaykit
into pydantic and the provider SDKs), later runs take a second or two. mypy runs in a
subprocess: after a cold run in-process, the interpreter spends as long again freeing mypy's
objects at exit, where the command line skips that cleanup.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is a dev dependency")

ROOT = Path(__file__).resolve().parents[2]
# Their own entries in the shared mypy cache (test_tool_typing uses another name).
PROGRAM_MODULE = "relaykit_user_typing_program"
MISUSE_MODULE = "relaykit_user_typing_misuse"

PROGRAM = textwrap.dedent('''
    import asyncio
    from collections.abc import AsyncIterator
    from typing import Any, reveal_type

    import relaykit as rk


    @rk.tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}."


    @rk.tool
    async def approve_payment(ctx: rk.ToolContext, amount: float) -> str:
        """Ask a person to approve a payment."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt({"question": f"pay {amount} EUR?"})
        return "paid" if ctx.resume_data else "cancelled"


    class Greeter(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput,
                      **options: Any) -> AsyncIterator[rk.AgentEvent]:
            reveal_type(ctx.flow)
            reveal_type(input.messages)
            name = ctx.get_session_value("user", "there")
            yield rk.AgentEvent.from_message(rk.Message.assistant(f"Hello {name}."))


    def call(call_id: str, name: str, arguments: str) -> rk.Message:
        return rk.Message.assistant("", [rk.ToolCall(call_id, name, arguments)])


    model = rk.ScriptedModel([
        call("c1", "get_weather", '{"city": "Paris"}'),
        call("c2", "approve_payment", '{"amount": 10}'),
        rk.Message.assistant("Paid; it is sunny in Paris."),
    ])
    assistant = rk.ChatModelAgent("assistant", "pays and forecasts", instruction="Be brief.",
                                  model=model, tools=[get_weather, approve_payment])
    pipeline = rk.SequentialAgent("pipeline", [Greeter("greeter"), assistant])
    runner = rk.Runner(pipeline, checkpoint_store=rk.InMemoryCheckpointStore())
    reveal_type(rk.Runner)
    reveal_type(get_weather)


    async def main() -> list[str]:
        result = await runner.invoke("Pay 10 EUR.", session_values={"user": "Ana"})
        reveal_type(result)
        reveal_type(result.output)
        reveal_type(result.events)
        reveal_type(result.interrupt)
        for ev in result.events:
            reveal_type(ev.action)
        assert result.interrupt is not None and result.checkpoint_id is not None
        point = result.interrupt.contexts[0]
        reveal_type(point.id)
        done = await runner.invoke_resume(result.checkpoint_id, targets={point.id: True})
        texts = [ev.message.content for ev in [*result.events, *done.events]
                 if ev.message is not None and ev.message.content]
        # The decorated function stays callable as itself (here: as a resumed call).
        tool_ctx = rk.ToolContext(rk.RunContext.new(), "approve_payment", "c9",
                                  is_resume_target=True, resume_data=False)
        reveal_type(await approve_payment(tool_ctx, 5.0))
        return texts


    print(asyncio.run(main()))
''')

REVEALED = [
    "relaykit.context.TransferScope | None",
    "list[relaykit.messages.Message]",
    # The Runner's constructor, as a user's editor shows it.
    "def (agent: relaykit.agent.Agent, *, app_name: str =, streaming: bool =, "
    "checkpoint_store: relaykit.checkpoints.base.CheckpointStore | None =, "
    "session_service: relaykit.sessions.base.SessionService | None =, "
    "plugins: typing.Sequence[relaykit.plugins.Plugin] =, "
    "artifact_service: relaykit.artifacts.base.ArtifactService | None =, "
    "memory_service: relaykit.memory.MemoryService | None =, "
    "compaction: relaykit.compaction.CompactionConfig | None =, auto_create_session: bool =, "
    "save_input_blobs_as_artifacts: bool =, checkpoint_signing_key: bytes | None =, "
    "max_transfers: int =, session_lock_timeout: float =) -> relaykit.runner.Runner",
    "relaykit.tools.function.FunctionTool[[city: str], str]",
    "relaykit.results.RunResult",
    "relaykit.messages.Message | None",
    "list[relaykit.events.AgentEvent]",
    "relaykit.resume.InterruptInfo | None",
    "relaykit.events.AgentAction | None",
    "str",
    "str",
]

MISUSE = textwrap.dedent("""
    import relaykit as rk

    model = rk.ScriptedModel([rk.Message.assistant("hi")])
    agent = rk.ChatModelAgent("assistant", model=model)
    runner = rk.Runner(agent)
    ctx = rk.RunContext.new()


    async def main() -> None:
        await runner.invoke("hi", checkpoint="c1")  # WRONG: no such option
        await runner.invoke_resume("c1", targets=["p1"])  # WRONG: targets map ids to data
        agent.run(ctx, [rk.Message.user("hi")])  # WRONG: an AgentInput, not a list
        await model.generate([rk.Message.user("hi")])  # WRONG: a ModelRequest, not a list


    rk.Runner(agent, session_service=object())  # WRONG: not a SessionService
    rk.ModelRequest([rk.Message.user("hi")], tools=["get_weather"])  # WRONG: ToolSpecs
    ctx.derive(flow="root")  # WRONG: a TransferScope
""")


def _parse(stdout: str) -> dict[str, tuple[list[str], list[str]]]:
    """mypy's (notes, errors) per module, each as ``<line>: <message>``."""
    found: dict[str, tuple[list[str], list[str]]] = {
        PROGRAM_MODULE: ([], []),
        MISUSE_MODULE: ([], []),
    }
    modules = "|".join(found)
    for line in stdout.splitlines():
        # Any folder: mypy may replay a cached result, with the path of an earlier run.
        m = re.match(rf"(?:.*[/\\])?({modules})\.py:(\d+): (note|error): (.*)", line)
        assert m, f"unexpected mypy output: {line}"
        notes, errors = found[m.group(1)]
        (notes if m.group(3) == "note" else errors).append(f"{m.group(2)}: {m.group(4)}")
    return found


@pytest.fixture(scope="module")
def checked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, tuple[list[str], list[str]]]]:
    """The program's folder, and mypy's (notes, errors) for both files."""
    folder = tmp_path_factory.mktemp("user_typing")
    (folder / f"{PROGRAM_MODULE}.py").write_text(PROGRAM, encoding="utf-8")
    (folder / f"{MISUSE_MODULE}.py").write_text(MISUSE, encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(folder / f"{PROGRAM_MODULE}.py"),
            str(folder / f"{MISUSE_MODULE}.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # 0: no errors, 1: errors found (the misuse file has some); anything else is a crash.
    assert proc.returncode in (0, 1) and not proc.stderr, proc.stderr
    return folder, _parse(proc.stdout)


def test_a_typed_user_program_passes_mypy_strict(
    checked: tuple[Path, dict[str, tuple[list[str], list[str]]]],
) -> None:
    _, found = checked
    _, errors = found[PROGRAM_MODULE]
    assert errors == []


def test_what_the_program_reveals_is_precise_and_free_of_any(
    checked: tuple[Path, dict[str, tuple[list[str], list[str]]]],
) -> None:
    _, found = checked
    notes, _ = found[PROGRAM_MODULE]
    # Older mypy versions spell builtins with their module.
    revealed = [
        n.split("Revealed type is ", 1)[1].strip('"').replace("builtins.", "")
        for n in notes
        if "Revealed type is" in n
    ]
    assert not [r for r in revealed if "Any" in r]
    assert revealed == REVEALED


def test_misusing_the_api_is_a_type_error_on_each_marked_line(
    checked: tuple[Path, dict[str, tuple[list[str], list[str]]]],
) -> None:
    _, found = checked
    _, errors = found[MISUSE_MODULE]
    wrong = [n for n, text in enumerate(MISUSE.splitlines(), start=1) if "# WRONG" in text]
    assert sorted({int(e.split(":", 1)[0]) for e in errors}) == wrong, errors


def test_the_typed_program_runs_and_resumes_its_interrupted_tool(
    checked: tuple[Path, dict[str, tuple[list[str], list[str]]]],
) -> None:
    folder, _ = checked
    proc = subprocess.run(
        [sys.executable, f"{PROGRAM_MODULE}.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "['Hello Ana.', 'It is sunny in Paris.', 'paid', 'Paid; it is sunny in Paris.']"
    ]
