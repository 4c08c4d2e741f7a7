"""History compaction rules: config validation, the sliding window, the token rule, summary
events, applying summaries to a history, and summarising with a model or a function."""

from __future__ import annotations

from typing import Any

import pytest

from relaykit import ScriptedModel
from relaykit.compaction import (
    SUMMARY_PREFIX,
    SUMMARY_SYSTEM_PROMPT,
    CompactionConfig,
    apply_summaries,
    sliding_window_range,
    summarize,
    summary_event,
    token_retention_range,
)
from relaykit.errors import ConfigurationError, ModelError, RelayKitError
from relaykit.events import AgentAction
from relaykit.messages import Message, ToolCall
from relaykit.sessions import InMemorySessionService, SessionEvent, compaction_range

WINDOW = CompactionConfig(compaction_interval=2, overlap_size=1)


def turn(n: int, *, reply: str | None = None) -> list[SessionEvent]:
    """Invocation ``n``: the user's message and the agent's answer (ids ``u<n>``, ``a<n>``)."""
    return [
        SessionEvent(
            id=f"u{n}", invocation_id=f"i{n}", author="user", message=Message.user(f"q{n}")
        ),
        SessionEvent(
            id=f"a{n}",
            invocation_id=f"i{n}",
            author="helper",
            message=Message.assistant(reply or f"answer {n}"),
        ),
    ]


def call(id: str, inv: str, *call_ids: str) -> SessionEvent:
    calls = [ToolCall(c, "lookup", '{"q": 1}') for c in call_ids]
    return SessionEvent(
        id=id, invocation_id=inv, author="helper", message=Message.assistant("", calls)
    )


def result(id: str, inv: str, call_id: str) -> SessionEvent:
    return SessionEvent(
        id=id,
        invocation_id=inv,
        author="helper",
        message=Message.tool("42", tool_call_id=call_id, tool_name="lookup"),
    )


def summary(events: list[SessionEvent], text: str, id: str) -> SessionEvent:
    event = summary_event(events, text, invocation_id="compaction", author="helper")
    event.id = id
    return event


def hand_summary(id: str, start: str, end: str) -> SessionEvent:
    return SessionEvent(
        id=id,
        author="helper",
        message=Message.user(SUMMARY_PREFIX + id),
        action=AgentAction(custom={"compaction": {"start": start, "end": end}}),
    )


def ids(events: list[SessionEvent]) -> list[str]:
    return [e.id for e in events]


# --- CompactionConfig ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "needs compaction_interval and overlap_size, or token_threshold"),
        ({"compaction_interval": 2}, "compaction_interval and overlap_size must be set together"),
        ({"overlap_size": 1}, "compaction_interval and overlap_size must be set together"),
        ({"token_threshold": 10}, "token_threshold and event_retention_size must be set"),
        ({"event_retention_size": 3}, "token_threshold and event_retention_size must be set"),
        ({"compaction_interval": 0, "overlap_size": 0}, "compaction_interval must be a positive"),
        ({"compaction_interval": -2, "overlap_size": 0}, "compaction_interval must be a positive"),
        (
            {"compaction_interval": True, "overlap_size": 0},
            "compaction_interval must be a positive",
        ),
        ({"compaction_interval": 2.0, "overlap_size": 0}, "compaction_interval must be a positive"),
        ({"compaction_interval": 2, "overlap_size": 2}, "overlap_size (2) must be smaller"),
        ({"compaction_interval": 2, "overlap_size": 5}, "overlap_size (5) must be smaller"),
        ({"compaction_interval": 2, "overlap_size": -1}, "overlap_size must be >= 0"),
        ({"compaction_interval": 2, "overlap_size": "1"}, "overlap_size must be an int"),
        ({"token_threshold": 0, "event_retention_size": 1}, "token_threshold must be a positive"),
        ({"token_threshold": 10, "event_retention_size": 0}, "event_retention_size must be a"),
        ({"token_threshold": 10, "event_retention_size": 1, "summarizer": "gpt"}, "summarizer"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        CompactionConfig(**kwargs)
    assert fragment in str(info.value)


def test_config_accepts_either_pair_or_both() -> None:
    async def fn(events: list[SessionEvent]) -> str:
        return "s"

    CompactionConfig(compaction_interval=1, overlap_size=0)
    CompactionConfig(token_threshold=1, event_retention_size=1, summarizer=fn)
    both = CompactionConfig(
        compaction_interval=3,
        overlap_size=2,
        token_threshold=100,
        event_retention_size=4,
        summarizer=ScriptedModel([]),
    )
    assert both.overlap_size == 2


# --- sliding window --------------------------------------------------------------------------


async def test_sliding_window_docstring_sequence() -> None:
    """interval=2, overlap=1: summarise 1–2, then 2–4, then 4–6; each summary rolls forward."""
    model = ScriptedModel(
        [Message.assistant("S1 text"), Message.assistant("S2 text"), Message.assistant("S3")]
    )
    events = turn(1)
    assert sliding_window_range(events, WINDOW) is None
    events += turn(2)
    assert sliding_window_range(events, WINDOW) == (0, 4)
    s1 = summary(events[0:4], await summarize(events[0:4], model), "s1")
    assert compaction_range(s1) == ("u1", "a2")
    assert s1.message == Message.user("Summary of the earlier conversation: S1 text")
    events.append(s1)
    assert ids(apply_summaries(events)) == ["s1"]

    events += turn(3)
    assert sliding_window_range(events, WINDOW) is None  # one new invocation
    events += turn(4)
    window = sliding_window_range(events, WINDOW)
    assert window is not None
    start, stop = window
    # From invocation 2 (the overlap) to the end of invocation 4, the first summary inside.
    assert ids(events[start:stop]) == ["u2", "a2", "s1", "u3", "a3", "u4", "a4"]
    text = await summarize(events[start:stop], model)
    transcript = model.requests[1].messages[1].content
    assert transcript.splitlines() == [
        "Earlier summary: S1 text",
        "user: q2",
        "helper: answer 2",
        "user: q3",
        "helper: answer 3",
        "user: q4",
        "helper: answer 4",
    ]
    s2 = summary(events[start:stop], text, "s2")
    assert compaction_range(s2) == ("u1", "a4")  # stands for what s1 did too
    events.append(s2)
    assert ids(apply_summaries(events)) == ["s2"]

    events += turn(5)
    assert sliding_window_range(events, WINDOW) is None
    events += turn(6)
    window = sliding_window_range(events, WINDOW)
    assert window is not None
    assert ids(events[window[0] : window[1]]) == ["u4", "a4", "s2", "u5", "a5", "u6", "a6"]
    s3 = summary(events[window[0] : window[1]], "S3", "s3")
    assert compaction_range(s3) == ("u1", "a6")
    events.append(s3)
    events += turn(7)
    assert ids(apply_summaries(events)) == ["s3", "u7", "a7"]


async def test_history_matches_the_session_store() -> None:
    """apply_summaries gives what InMemorySessionService.load_history gives (latest summary)."""
    service = InMemorySessionService()
    session = await service.create_session("app", "u", "s")
    events: list[SessionEvent] = []

    async def append(event: SessionEvent) -> None:
        events.append(await service.append_event(session, event))

    for n in range(1, 7):
        for event in turn(n):
            await append(event)
        window = sliding_window_range(events, WINDOW)
        if window is not None:
            covered = events[window[0] : window[1]]
            await append(summary_event(covered, f"upto {n}", invocation_id=f"i{n}", author="h"))
        history = await service.load_history("app", "u", "s")
        assert ids(history) == ids(apply_summaries(events))
    assert [e.message.content for e in apply_summaries(events) if e.message] == [
        SUMMARY_PREFIX + "upto 6"
    ]


def test_sliding_window_without_overlap_and_late_call() -> None:
    config = CompactionConfig(compaction_interval=2, overlap_size=0)
    events = turn(1) + turn(2) + turn(3)
    # Called late: every new invocation is in the range.
    assert sliding_window_range(events, config) == (0, 6)
    s1 = summary(events, "s", "s1")
    events = [*events, s1, *turn(4), *turn(5)]
    window = sliding_window_range(events, config)
    assert window is not None
    assert ids(events[window[0] : window[1]]) == ["s1", "u4", "a4", "u5", "a5"]
    assert compaction_range(summary(events[window[0] : window[1]], "t", "s2")) == ("u1", "a5")


def test_sliding_window_counts_only_user_invocations() -> None:
    agent_only = SessionEvent(
        id="x", invocation_id="ix", author="helper", message=Message.assistant("tick")
    )
    no_invocation = SessionEvent(id="y", author="user", message=Message.user("?"))
    events = [*turn(1), agent_only, no_invocation, *turn(2)]
    config = CompactionConfig(compaction_interval=3, overlap_size=0)
    assert sliding_window_range(events, config) is None
    events += turn(3)
    assert sliding_window_range(events, config) == (0, len(events))


def test_sliding_window_not_configured() -> None:
    config = CompactionConfig(token_threshold=1, event_retention_size=1)
    assert sliding_window_range(turn(1) + turn(2) + turn(3), config) is None
    assert sliding_window_range([], WINDOW) is None


def test_sliding_window_keeps_tool_calls_with_their_results() -> None:
    # Invocation 2 is still running: its second call has no result yet.
    events = [
        *turn(1),
        SessionEvent(id="u2", invocation_id="i2", author="user", message=Message.user("q2")),
        call("c1", "i2", "k1"),
        result("r1", "i2", "k1"),
        call("c2", "i2", "k2", "k3"),
        result("r2", "i2", "k2"),
    ]
    assert sliding_window_range(events, WINDOW) == (0, 5)  # up to r1, not c2
    events.append(result("r3", "i2", "k3"))
    assert sliding_window_range(events, WINDOW) == (0, 8)


def test_sliding_window_none_when_the_cut_leaves_no_new_event() -> None:
    # A call of invocation 1 (the overlap) answered only after invocation 3.
    events = [
        SessionEvent(id="u1", invocation_id="i1", author="user", message=Message.user("q1")),
        call("c1", "i1", "k1"),
        hand_summary("s1", "u1", "u1"),
        *turn(2),
        *turn(3),
        result("r1", "i1", "k1"),
    ]
    assert sliding_window_range(events, WINDOW) is None
    # Without the late result, the call was abandoned and does not hold the range back.
    assert sliding_window_range(events[:-1], WINDOW) == (0, 7)


def test_sliding_window_abandoned_call_does_not_block() -> None:
    events = [
        SessionEvent(id="u1", invocation_id="i1", author="user", message=Message.user("q1")),
        call("c1", "i1", "k1"),  # the run failed before the tool answered
        *turn(2),
    ]
    assert sliding_window_range(events, WINDOW) == (0, 4)


# --- token rule ------------------------------------------------------------------------------

TOKENS = CompactionConfig(token_threshold=1000, event_retention_size=2)


def test_token_rule_threshold() -> None:
    events = turn(1) + turn(2)
    assert token_retention_range(events, TOKENS, 999) is None
    assert token_retention_range(events, TOKENS, 1000) == (0, 2)
    assert token_retention_range(events, TOKENS, 50_000) == (0, 2)
    assert token_retention_range(turn(1), TOKENS, 50_000) is None  # nothing before the tail
    window_only = CompactionConfig(compaction_interval=1, overlap_size=0)
    assert token_retention_range(events, window_only, 50_000) is None


def test_token_rule_keeps_a_result_with_its_call() -> None:
    events = [
        *turn(1),
        SessionEvent(id="u2", invocation_id="i2", author="user", message=Message.user("q2")),
        call("c1", "i2", "k1", "k2"),
        result("r1", "i2", "k1"),
        result("r2", "i2", "k2"),
        SessionEvent(
            id="a2", invocation_id="i2", author="helper", message=Message.assistant("done")
        ),
    ]
    # The last two are r2 and a2; r2 answers c1, so the tail starts at c1.
    assert token_retention_range(events, TOKENS, 2000) == (0, 3)
    one = CompactionConfig(token_threshold=1, event_retention_size=1)
    assert token_retention_range(events, one, 1) == (0, 6)
    # A tail that would start at a result moves back to its call, and further for the
    # results the call brings along.
    chained = [*turn(1), call("c1", "i1", "k1"), call("c2", "i1", "k2"), result("r2", "i1", "k2")]
    chained.append(result("r1", "i1", "k1"))
    assert token_retention_range(chained, TOKENS, 2000) == (0, 2)


def test_token_rule_does_not_count_summaries_and_rolls_forward() -> None:
    events = turn(1) + turn(2) + turn(3)
    first = token_retention_range(events, TOKENS, 5000)
    assert first == (0, 4)
    s1 = summary(events[0:4], "one", "s1")
    events.append(s1)
    # Retention counts raw events only: a3 and u3 stay, s1 is not one of them.
    assert token_retention_range(events, TOKENS, 5000) is None
    events += turn(4)
    window = token_retention_range(events, TOKENS, 5000)
    assert window is not None
    assert ids(events[window[0] : window[1]]) == ["u3", "a3", "s1"]
    s2 = summary(events[window[0] : window[1]], "two", "s2")
    assert compaction_range(s2) == ("u1", "a3")
    events.append(s2)
    assert ids(apply_summaries(events)) == ["s2", "u4", "a4"]


def test_token_rule_waits_while_the_summary_is_inside_the_tail() -> None:
    config = CompactionConfig(token_threshold=10, event_retention_size=3)
    events = turn(1) + turn(2)
    s1 = hand_summary("s1", "u1", "a1")
    events = [*events, s1, *turn(3)]  # s1 is stored after a2, which the tail keeps
    # Raw: u1 a1 u2 a2 u3 a3; the tail is a2 u3 a3 and holds s1: s1 cannot be carried.
    assert token_retention_range(events, config, 10) is None
    events += turn(4)  # the tail (u3 a3 u4... ) has moved past s1
    window = token_retention_range(events, config, 10)
    assert window is not None
    assert ids(events[window[0] : window[1]]) == ["u2", "a2", "s1", "u3"]
    s2 = summary(events[window[0] : window[1]], "t", "s2")
    assert compaction_range(s2) == ("u1", "u3")
    assert ids(apply_summaries([*events, s2])) == ["s2", "a3", "u4", "a4"]


def test_sliding_window_waits_while_the_summary_is_stored_after_the_range() -> None:
    config = CompactionConfig(compaction_interval=2, overlap_size=0)
    # s1 (covering invocation 1) was stored late, after invocations 2 and 3.
    events = [*turn(1), *turn(2), *turn(3), hand_summary("s1", "u1", "a1")]
    assert sliding_window_range(events, config) is None
    events += turn(4)
    window = sliding_window_range(events, config)
    assert window is not None
    assert ids(events[window[0] : window[1]]) == ["u2", "a2", "u3", "a3", "s1", "u4", "a4"]


# --- summary_event ---------------------------------------------------------------------------


def test_summary_event_shape() -> None:
    events = turn(1)
    event = summary_event(events, "short", invocation_id="i9", author="helper")
    assert event.invocation_id == "i9"
    assert event.author == "helper"
    assert event.id == ""
    assert event.message == Message.user("Summary of the earlier conversation: short")
    assert event.action == AgentAction(custom={"compaction": {"start": "u1", "end": "a1"}})


def test_summary_event_needs_a_raw_event() -> None:
    with pytest.raises(ValueError, match="at least one"):
        summary_event([hand_summary("s1", "u1", "a1")], "x", invocation_id="i", author="h")
    with pytest.raises(ValueError, match="at least one"):
        summary_event([], "x", invocation_id="i", author="h")


def test_summary_event_starts_at_the_earliest_summary_in_range() -> None:
    events = turn(1) + turn(2)
    later = hand_summary("s", "a1", "u2")  # starts inside the range, after u1
    assert compaction_range(summary([*events, later], "t", "x")) == ("u1", "a2")
    earlier = hand_summary("s", "u0", "u1")  # starts before the range
    assert compaction_range(summary([*events[1:], earlier], "t", "x")) == ("u0", "a2")


# --- apply_summaries -------------------------------------------------------------------------


def test_apply_summaries_without_summaries() -> None:
    events = turn(1) + turn(2)
    assert apply_summaries(events) == events
    assert apply_summaries([]) == []


def test_apply_summaries_overlapping_latest_wins() -> None:
    events = turn(1) + turn(2) + turn(3)  # u1 a1 u2 a2 u3 a3
    s1 = hand_summary("s1", "u1", "a2")
    s2 = hand_summary("s2", "u2", "u3")
    history = apply_summaries([*events[:4], s1, *events[4:], s2])
    # s1 keeps u1 a1 only; s2 (later) wins u2 a2 and covers u3.
    assert ids(history) == ["s1", "s2", "a3"]


def test_apply_summaries_subsumed_and_nested() -> None:
    events = turn(1) + turn(2) + turn(3)
    s1 = hand_summary("s1", "a1", "u2")
    s2 = hand_summary("s2", "u1", "a2")  # subsumes s1
    assert ids(apply_summaries([*events, s1, s2])) == ["s2", "u3", "a3"]


def test_apply_summaries_nested_later_summary() -> None:
    events = turn(1) + turn(2) + turn(3)
    outer = hand_summary("outer", "u1", "a3")
    inner = hand_summary("inner", "u2", "a2")
    # outer stands where its first event was; inner takes its own events.
    assert ids(apply_summaries([*events, outer, inner])) == ["outer", "inner"]


def test_apply_summaries_bad_ranges() -> None:
    events = turn(1) + turn(2)
    unknown_end = hand_summary("s1", "u1", "nope")
    backwards = hand_summary("s2", "a2", "u1")
    assert ids(apply_summaries([*events, unknown_end, backwards])) == ids(events)
    unknown_start = hand_summary("s3", "gone", "a1")  # covers from the first event
    assert ids(apply_summaries([*events, unknown_start])) == ["s3", "u2", "a2"]
    # A summary's id is never a range end: a range naming a summary is ignored.
    s1 = hand_summary("s1", "u1", "a1")
    on_summary = hand_summary("s4", "u1", "s1")
    assert ids(apply_summaries([*events, s1, on_summary])) == ["s1", "u2", "a2"]


# --- summarize -------------------------------------------------------------------------------


async def test_summarize_with_a_model_renders_events() -> None:
    events = [
        *turn(1),
        call("c1", "i1", "k1"),
        result("r1", "i1", "k1"),
        SessionEvent(id="e", invocation_id="i1", author="helper", error="ValueError: boom"),
        SessionEvent(id="n", invocation_id="i1", author="helper"),  # nothing to render
    ]
    model = ScriptedModel([Message.assistant("  The user asked q1.  ")])
    assert await summarize(events, model) == "The user asked q1."
    (request,) = model.requests
    assert request.messages[0] == Message.system(SUMMARY_SYSTEM_PROMPT)
    assert request.tools == []
    assert request.messages[1].role == "user"
    assert request.messages[1].content.splitlines() == [
        "user: q1",
        "helper: answer 1",
        'helper: calls lookup({"q": 1}) [k1]',
        "helper: result of lookup [k1]: 42",
        "helper: error: ValueError: boom",
    ]


async def test_summarize_with_a_function() -> None:
    seen: list[list[SessionEvent]] = []

    async def fn(events: list[SessionEvent]) -> str:
        seen.append(events)
        return "by function"

    events = turn(1)
    assert await summarize(events, fn) == "by function"
    assert seen == [events]


async def test_summarize_failures_name_the_summarizer_not_the_events() -> None:
    secret = "credit card 4111"
    events = [SessionEvent(id="u", invocation_id="i", author="user", message=Message.user(secret))]
    model = ScriptedModel([ModelError(f"provider echoed {secret}")], name="sum-model")
    with pytest.raises(RelayKitError) as info:
        await summarize(events, model)
    assert "ScriptedModel 'sum-model'" in str(info.value)
    assert "ModelError" in str(info.value)
    assert "4111" not in str(info.value)
    assert isinstance(info.value.__cause__, ModelError)

    async def broken(events: list[SessionEvent]) -> str:
        raise ValueError(secret)

    with pytest.raises(RelayKitError) as info:
        await summarize(events, broken)
    assert "broken" in str(info.value)
    assert "4111" not in str(info.value)

    async def not_text(events: list[SessionEvent]) -> str:
        return 42  # type: ignore[return-value]

    with pytest.raises(RelayKitError, match=r"not_text.* returned int"):
        await summarize(events, not_text)

    with pytest.raises(RelayKitError, match="empty summary"):
        await summarize(events, ScriptedModel([Message.assistant("   ")]))
