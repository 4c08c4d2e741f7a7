"""A resumed workflow hands each interrupted child the child's own interrupt info
(eino-reference workflow resume: the child's info replaces the workflow's for that subtree)."""

from __future__ import annotations

import relaykit as rk

from .helpers import ScriptedAgent, leaf


async def _resume(tree: rk.Agent) -> rk.RunResult:
    runner = rk.Runner(tree, checkpoint_store=rk.InMemoryCheckpointStore())
    first = await runner.invoke("go", checkpoint_id="c")
    assert first.interrupt is not None
    return await runner.invoke_resume("c")


async def test_sequential_child_resumes_with_its_own_interrupt_info() -> None:
    b = leaf("B", {"question": "approve B?"})
    result = await _resume(rk.SequentialAgent("S", [ScriptedAgent("A", ["a1"]), b]))
    info = b.resume_infos[0].interrupt_info
    assert info is not None and info.data == {"question": "approve B?"}
    assert [c.info for c in info.contexts] == [{"question": "approve B?"}]
    assert result.output is not None and result.output.content == "B done None"


async def test_loop_child_resumes_with_its_own_interrupt_info() -> None:
    b = leaf("B", "need B")
    await _resume(rk.LoopAgent("L", [ScriptedAgent("A", ["a1"]), b], max_iterations=1))
    info = b.resume_infos[0].interrupt_info
    assert info is not None and info.data == "need B"


async def test_parallel_branches_resume_each_with_their_own_interrupt_info() -> None:
    l1, l2 = leaf("L1", "need L1"), leaf("L2", "need L2")
    await _resume(rk.ParallelAgent("P", [l1, ScriptedAgent("OK", ["ok"]), l2]))
    first, second = l1.resume_infos[0].interrupt_info, l2.resume_infos[0].interrupt_info
    assert first is not None and first.data == "need L1"
    assert second is not None and second.data == "need L2"
    assert [c.info for c in first.contexts] == ["need L1"]


async def test_nested_workflow_child_gets_the_inner_workflows_info() -> None:
    b = leaf("B", "need B")
    inner = rk.SequentialAgent("inner", [b])
    await _resume(rk.SequentialAgent("outer", [ScriptedAgent("A", ["a1"]), inner]))
    info = b.resume_infos[0].interrupt_info
    assert info is not None and info.data == "need B"
