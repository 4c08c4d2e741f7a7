"""History compaction: when to summarise a session's events, and how a summary stands for them.

A *summary* is a stored ``SessionEvent`` whose ``action.custom`` is
``{"compaction": {"start": <event id>, "end": <event id>}}`` (``compaction_range``) and whose
message is one ``user`` message ``Summary of the earlier conversation: <text>``. In an agent's
history it replaces the events from ``start`` to ``end`` (``apply_summaries``). Summary events
are never counted as invocations or kept events, and never become the start or end of a range.

Two rules decide what to summarise, both pure functions over the session's stored events (in
order) that return a half-open range ``(start, stop)`` of indices, ``events[start:stop]``:

- ``sliding_window_range``: every ``compaction_interval`` new user invocations, the invocations
  since the latest summary plus ``overlap_size`` invocations before them;
- ``token_retention_range``: once the prompt reaches ``token_threshold`` tokens, everything but
  the last ``event_retention_size`` events.

**Summaries roll forward.** ``SessionService.load_history`` keeps only the latest summary (and
the events after the range it covers), so a new summary must also stand for what the previous
one covered. Both rules therefore put the latest summary event inside the range they return
(and return None while it is stored past the range, until later events move the range past it);
``summarize`` gives the summarizer the earlier summaries' text first, then the raw events of the
range (the overlap invocations among them, so the summarizer sees them in full again), and
``summary_event`` makes the new summary cover from the earliest start of the summaries in its
range. Interval 2 with overlap 1 summarises invocations 1–2, then 2–4 (with the first summary's
text), then 4–6 (with the second's); the three summaries cover 1–2, 1–4 and 1–6, and the latest
one alone is the history before invocation 7.

A range never splits a tool call from its result: the sliding window ends at the longest prefix
whose tool calls all have their results, and the token rule moves the start of the kept tail back
to a call whose result it keeps.

>>> from relaykit.messages import Message
>>> events = [
...     SessionEvent(id=f"e{i}", invocation_id=f"i{i // 2}",
...                  author="user" if i % 2 == 0 else "helper",
...                  message=Message.user("q") if i % 2 == 0 else Message.assistant("a"))
...     for i in range(4)
... ]
>>> config = CompactionConfig(compaction_interval=2, overlap_size=1)
>>> sliding_window_range(events, config)
(0, 4)
>>> summary = summary_event(events[0:4], "asked twice", invocation_id="i1", author="helper")
>>> [e.id or e.message.content for e in apply_summaries([*events, summary])]
['Summary of the earlier conversation: asked twice']
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from relaykit.errors import ConfigurationError, RelayKitError
from relaykit.events import AgentAction
from relaykit.messages import Message
from relaykit.models.base import ChatModel, ModelRequest
from relaykit.sessions.base import SessionEvent, compaction_range

__all__ = [
    "SUMMARY_PREFIX",
    "SUMMARY_SYSTEM_PROMPT",
    "CompactionConfig",
    "Summarizer",
    "apply_summaries",
    "sliding_window_range",
    "summarize",
    "summary_event",
    "token_retention_range",
]

#: What a summary's message starts with, before the summary text.
SUMMARY_PREFIX = "Summary of the earlier conversation: "

#: The system prompt of the summarizer model.
SUMMARY_SYSTEM_PROMPT = (
    "You summarise conversations between a user and AI agents. Write a concise summary of the "
    "conversation below that keeps every fact, decision, open question and tool result the "
    "agents may need to go on. When an earlier summary is given, fold it into yours. "
    "Answer with the summary text only."
)

#: A summarizer: a chat model, or an async function from events to the summary text.
Summarizer = ChatModel | Callable[[list[SessionEvent]], Awaitable[str]]


def _positive(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"CompactionConfig: {name} must be a positive int, not {type(value).__name__}"
        )
    if value < 1:
        raise ConfigurationError(f"CompactionConfig: {name} must be a positive int (got {value})")
    return value


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """When to summarise a session's history, and with what.

    Set ``compaction_interval`` with ``overlap_size`` (the sliding window), ``token_threshold``
    with ``event_retention_size`` (the token rule), or both pairs. Checked when built:
    ``ConfigurationError`` names the problem.

    >>> CompactionConfig(token_threshold=50_000, event_retention_size=10).compaction_interval
    >>> CompactionConfig(compaction_interval=3)
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: CompactionConfig: compaction_interval and overlap_size \
must be set together

    Args:
        compaction_interval: summarise once this many new user invocations follow the latest
            summary.
        overlap_size: how many invocations before the new ones the window also summarises
            (0 to ``compaction_interval - 1``).
        token_threshold: summarise once the prompt has at least this many tokens.
        event_retention_size: how many of the latest events the token rule keeps as they are.
        summarizer: the model, or async function, that writes summaries; None leaves the choice
            to the caller (the Runner uses the agent's model).
    """

    #: Summarise once this many new user invocations follow the latest summary.
    compaction_interval: int | None = None
    #: How many invocations before the new ones the sliding window also summarises.
    overlap_size: int | None = None
    #: Summarise once the prompt has at least this many tokens.
    token_threshold: int | None = None
    #: How many of the latest events (summaries not counted) the token rule keeps as they are.
    event_retention_size: int | None = None
    #: The model, or async function, that writes summaries; None: the caller's choice.
    summarizer: Summarizer | None = None

    def __post_init__(self) -> None:
        interval = _positive(self.compaction_interval, "compaction_interval")
        if isinstance(self.overlap_size, bool) or not isinstance(self.overlap_size, int | None):
            raise ConfigurationError(
                "CompactionConfig: overlap_size must be an int >= 0, "
                f"not {type(self.overlap_size).__name__}"
            )
        threshold = _positive(self.token_threshold, "token_threshold")
        retention = _positive(self.event_retention_size, "event_retention_size")
        if (interval is None) != (self.overlap_size is None):
            raise ConfigurationError(
                "CompactionConfig: compaction_interval and overlap_size must be set together"
            )
        if (threshold is None) != (retention is None):
            raise ConfigurationError(
                "CompactionConfig: token_threshold and event_retention_size must be set together"
            )
        if interval is None and threshold is None:
            raise ConfigurationError(
                "CompactionConfig needs compaction_interval and overlap_size, or "
                "token_threshold and event_retention_size (or both pairs)"
            )
        if interval is not None and self.overlap_size is not None:
            if self.overlap_size < 0:
                raise ConfigurationError(
                    f"CompactionConfig: overlap_size must be >= 0 (got {self.overlap_size})"
                )
            if self.overlap_size >= interval:
                raise ConfigurationError(
                    f"CompactionConfig: overlap_size ({self.overlap_size}) must be smaller "
                    f"than compaction_interval ({interval})"
                )
        summarizer = self.summarizer
        if summarizer is not None and not (
            isinstance(summarizer, ChatModel) or callable(summarizer)
        ):
            raise ConfigurationError(
                "CompactionConfig: summarizer must be a ChatModel or an async function of the "
                f"events, not {type(summarizer).__name__}"
            )


@dataclass(slots=True)
class _Summary:
    position: int
    start: int
    end: int


def _summaries(events: Sequence[SessionEvent]) -> list[_Summary]:
    """The usable summaries, in stored order, with the indices of the events they cover.

    A summary whose ``end`` is not among the raw events (or comes before its ``start``) is
    ignored; one whose ``start`` is unknown covers from the first event.
    """
    index: dict[str, int] = {}
    for i, event in enumerate(events):
        if event.id and compaction_range(event) is None:
            index.setdefault(event.id, i)
    found = []
    for i, event in enumerate(events):
        covered = compaction_range(event)
        if covered is None:
            continue
        end = index.get(covered[1])
        if end is None:
            continue
        start = index.get(covered[0], 0)
        if start <= end:
            found.append(_Summary(i, start, end))
    return found


def _is_summary(event: SessionEvent) -> bool:
    return compaction_range(event) is not None


def _with_latest_summary(start: int, stop: int, latest: _Summary | None) -> int | None:
    """The start of a range widened so that it holds the latest summary event, or None when
    that summary is stored at or after ``stop``.

    Such a range could not carry the summary forward, and summarising every raw event again
    instead would cost as much as the compaction saves: the rules wait until the events after
    the summary move the range past it.
    """
    if latest is None:
        return start
    if latest.position < stop:
        return min(start, latest.position)
    return None


def _open_calls_end(events: Sequence[SessionEvent], start: int, stop: int) -> int:
    """The end of the longest prefix of ``events[start:stop]`` in which no tool call still waits
    for its result (``start`` when there is none).

    A call waits when its result is stored later, or may still come: the call belongs to the
    session's latest invocation. A call of an earlier invocation that was never answered (its
    run failed or was abandoned) waits for nothing.
    """
    answered = {
        event.message.tool_call_id
        for event in events
        if event.message is not None and event.message.role == "tool"
    }
    live = next(
        (e.invocation_id for e in reversed(events) if e.invocation_id and not _is_summary(e)),
        None,
    )
    pending: set[str] = set()
    best = start
    for i in range(start, stop):
        event = events[i]
        message = event.message
        if message is not None:
            pending.update(
                call.id
                for call in message.tool_calls
                if call.id in answered or event.invocation_id == live
            )
            if message.role == "tool" and message.tool_call_id is not None:
                pending.discard(message.tool_call_id)
        if not pending:
            best = i + 1
    return best


def sliding_window_range(
    events: Sequence[SessionEvent], config: CompactionConfig
) -> tuple[int, int] | None:
    """The range ``(start, stop)`` of ``events`` to summarise by the sliding window, or None.

    An invocation is the events sharing an ``invocation_id`` whose first event is the user's
    (``author == "user"``); it is *new* when it starts after the last event the latest summary
    covers. Once ``compaction_interval`` new invocations exist, the range runs from the first
    event of the invocation ``overlap_size`` before the first new one (and from the latest
    summary event, when it is stored earlier) to the last event of the last new invocation,
    cut back to its longest prefix in which every tool call has its result (a call of an earlier
    invocation that was never answered does not count). None when there are too few new
    invocations, no sliding window is configured, the cut leaves no new event, or the latest
    summary is stored after the range (it could not be carried forward; later invocations
    move the range past it).

    >>> from relaykit.messages import Message
    >>> turns = [SessionEvent(id=f"e{i}", invocation_id=f"i{i}", author="user",
    ...                       message=Message.user(str(i))) for i in range(3)]
    >>> config = CompactionConfig(compaction_interval=3, overlap_size=0)
    >>> sliding_window_range(turns[:2], config), sliding_window_range(turns, config)
    (None, (0, 3))

    Args:
        events: the session's stored events, in order (summaries included).
        config: ``compaction_interval`` and ``overlap_size`` are used.
    """
    interval, overlap = config.compaction_interval, config.overlap_size
    if interval is None or overlap is None:
        return None
    summaries = _summaries(events)
    latest = summaries[-1] if summaries else None
    covered_end = latest.end if latest is not None else -1
    invocations: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        if event.invocation_id and not _is_summary(event):
            invocations.setdefault(event.invocation_id, []).append(i)
    started = [idx for idx in invocations.values() if events[idx[0]].author == "user"]
    new = [idx for idx in started if idx[0] > covered_end]
    if len(new) < interval:
        return None
    first_new = started.index(new[0])
    start = started[max(0, first_new - overlap)][0]
    stop = new[-1][-1] + 1
    stop = _open_calls_end(events, start, stop)
    if stop <= new[0][0]:
        return None
    widened = _with_latest_summary(start, stop, latest)
    return None if widened is None else (widened, stop)


def token_retention_range(
    events: Sequence[SessionEvent], config: CompactionConfig, prompt_tokens: int
) -> tuple[int, int] | None:
    """The range ``(start, stop)`` of ``events`` to summarise by the token rule, or None.

    When ``prompt_tokens`` (the prompt size reported since the latest summary) is at least
    ``token_threshold``, every event before the last ``event_retention_size`` raw events
    (summaries not counted) is summarised: the range runs from the first event after the
    latest summary's range (or from that summary event, when it is stored earlier) to the kept
    tail. The tail never starts with the result of a call left out of it: its start moves back
    to the call. None below the threshold, when no token rule is configured, when nothing new is
    left to summarise, or when the latest summary is stored inside the kept tail (it could not
    be carried forward; later events move the tail past it).

    >>> from relaykit.messages import Message
    >>> turns = [SessionEvent(id=f"e{i}", invocation_id=f"i{i}", author="user",
    ...                       message=Message.user(str(i))) for i in range(5)]
    >>> config = CompactionConfig(token_threshold=1000, event_retention_size=2)
    >>> token_retention_range(turns, config, 999), token_retention_range(turns, config, 1000)
    (None, (0, 3))

    Args:
        events: the session's stored events, in order (summaries included).
        config: ``token_threshold`` and ``event_retention_size`` are used.
        prompt_tokens: the input tokens of the latest model call, made since the latest
            summary.
    """
    threshold, retention = config.token_threshold, config.event_retention_size
    if threshold is None or retention is None or prompt_tokens < threshold:
        return None
    raw = [i for i, event in enumerate(events) if not _is_summary(event)]
    if len(raw) <= retention:
        return None
    boundary = raw[-retention]
    calls: dict[str, int] = {}
    for i, event in enumerate(events):
        if event.message is not None:
            for call in event.message.tool_calls:
                calls.setdefault(call.id, i)
    moved = True
    while moved:
        moved = False
        for i in range(boundary, len(events)):
            message = events[i].message
            if message is None or message.role != "tool" or message.tool_call_id is None:
                continue
            call_at = calls.get(message.tool_call_id)
            if call_at is not None and call_at < boundary:
                boundary, moved = call_at, True
                break
    summaries = _summaries(events)
    latest = summaries[-1] if summaries else None
    first_new = latest.end + 1 if latest is not None else 0
    if not any(first_new <= i < boundary for i in raw):
        return None
    widened = _with_latest_summary(first_new, boundary, latest)
    return None if widened is None else (widened, boundary)


def summary_event(
    events_in_range: Sequence[SessionEvent], text: str, *, invocation_id: str, author: str
) -> SessionEvent:
    """The summary of ``events_in_range``, ready to append to the session.

    It covers from the earliest start of the summaries in the range, or else from the first raw
    event, to the last raw event; its message is ``Message.user("Summary of the earlier
    conversation: <text>")``. ``ValueError`` if the range has no raw event with an id.

    >>> from relaykit.messages import Message
    >>> done = [SessionEvent(id="e1", author="user", message=Message.user("hi")),
    ...         SessionEvent(id="e2", author="helper", message=Message.assistant("hello"))]
    >>> summary = summary_event(done, "greetings", invocation_id="i2", author="helper")
    >>> summary.action.custom, summary.message.content
    ({'compaction': {'start': 'e1', 'end': 'e2'}}, 'Summary of the earlier conversation: \
greetings')

    Args:
        events_in_range: the events summarised (a range from ``sliding_window_range`` or
            ``token_retention_range``), summaries included.
        text: the summary text (from ``summarize``).
        invocation_id: the invocation that makes the summary.
        author: the event's author (the agent, or the app, making the summary).
    """
    raw = [(i, event) for i, event in enumerate(events_in_range) if not _is_summary(event)]
    raw = [(i, event) for i, event in raw if event.id]
    if not raw:
        raise ValueError("a compaction summary needs at least one stored (raw) event to cover")
    positions = {event.id: i for i, event in raw}
    start_at, start = raw[0]
    start_id = start.id
    for event in events_in_range:
        covered = compaction_range(event)
        if covered is None:
            continue
        at = positions.get(covered[0], -1)  # not in the range: it starts before the range
        if at < start_at:
            start_at, start_id = at, covered[0]
    return SessionEvent(
        invocation_id=invocation_id,
        author=author,
        message=Message.user(SUMMARY_PREFIX + text),
        action=AgentAction(custom={"compaction": {"start": start_id, "end": raw[-1][1].id}}),
    )


def apply_summaries(events: Sequence[SessionEvent]) -> list[SessionEvent]:
    """The events an agent's history is built from: each summary in place of what it covers.

    A raw event covered by summaries is replaced by the latest of them (stored last); each
    summary appears once, where the first event it replaces was; a summary that replaces
    nothing (a later one subsumes it) is left out, like a summary whose ``end`` is unknown.
    Events no summary covers stay as they are, in order.

    >>> from relaykit.messages import Message
    >>> ids = ["a", "b", "c"]
    >>> raw = [SessionEvent(id=i, author="user", message=Message.user(i)) for i in ids]
    >>> s1 = summary_event(raw[:2], "a and b", invocation_id="x", author="bot")
    >>> [e.id or "summary" for e in apply_summaries([raw[0], raw[1], s1, raw[2]])]
    ['summary', 'c']

    Args:
        events: the session's stored events, in order (summaries included).
    """
    winner: dict[int, _Summary] = {}
    for summary in _summaries(events):  # in stored order: a later summary overwrites
        for i in range(summary.start, summary.end + 1):
            if not _is_summary(events[i]):
                winner[i] = summary
    history: list[SessionEvent] = []
    placed: set[int] = set()
    for i, event in enumerate(events):
        if _is_summary(event):
            continue
        covering = winner.get(i)
        if covering is None:
            history.append(event)
        elif covering.position not in placed:
            placed.add(covering.position)
            history.append(events[covering.position])
    return history


def _render(event: SessionEvent) -> list[str]:
    """One line per part of ``event``: text, tool calls, tool results, errors."""
    lines: list[str] = []
    message = event.message
    who = event.author or "unknown"
    if message is not None:
        if message.role == "tool":
            tool = message.tool_name or "a tool"
            lines.append(f"{who}: result of {tool} [{message.tool_call_id}]: {message.content}")
        elif message.content:
            lines.append(f"{who}: {message.content}")
        for call in message.tool_calls:
            lines.append(f"{who}: calls {call.name}({call.arguments}) [{call.id}]")
    if event.error:
        lines.append(f"{who}: error: {event.error}")
    return lines


def _transcript(events: Sequence[SessionEvent]) -> str:
    earlier = [
        event.message.content
        for event in events
        if _is_summary(event) and event.message is not None
    ]
    lines = [f"Earlier summary: {text.removeprefix(SUMMARY_PREFIX)}" for text in earlier]
    for event in events:
        if not _is_summary(event):
            lines.extend(_render(event))
    return "\n".join(lines)


def _summarizer_name(summarizer: object) -> str:
    if isinstance(summarizer, ChatModel):
        name = getattr(summarizer, "name", None)
        kind = type(summarizer).__name__
        return f"{kind} {name!r}" if isinstance(name, str) and name else kind
    return getattr(summarizer, "__qualname__", None) or type(summarizer).__name__


async def summarize(events: Sequence[SessionEvent], summarizer: Summarizer) -> str:
    """The summary text of ``events`` (a range to summarise, summaries included).

    A ``ChatModel`` gets one ``generate`` call: ``SUMMARY_SYSTEM_PROMPT`` and one user message
    with the earlier summaries' text, then the raw events as lines (``author: text``, tool
    calls, tool results, errors). A function is called with the events as a list. A failure,
    or a reply without text, is a ``RelayKitError`` naming the summarizer (never the events'
    contents); the original exception is ``__cause__``.

    >>> import asyncio
    >>> from relaykit.messages import Message
    >>> from relaykit.models import ScriptedModel
    >>> model = ScriptedModel([Message.assistant("The user said hi.")])
    >>> hi = [SessionEvent(id="e1", author="user", message=Message.user("hi"))]
    >>> asyncio.run(summarize(hi, model))
    'The user said hi.'
    >>> model.requests[0].messages[1].content
    'user: hi'

    Args:
        events: the events to summarise (``events[start:stop]`` of a range).
        summarizer: the model, or async function of the events, that writes the summary.
    """
    name = _summarizer_name(summarizer)
    try:
        if isinstance(summarizer, ChatModel):
            request = ModelRequest(
                [Message.system(SUMMARY_SYSTEM_PROMPT), Message.user(_transcript(events))]
            )
            text: object = (await summarizer.generate(request)).content
        else:
            text = await summarizer(list(events))
    except Exception as exc:
        raise RelayKitError(
            f"the compaction summarizer {name} failed ({type(exc).__name__})"
        ) from exc
    if not isinstance(text, str):
        raise RelayKitError(
            f"the compaction summarizer {name} returned {type(text).__name__}, not str"
        )
    if not text.strip():
        raise RelayKitError(f"the compaction summarizer {name} returned an empty summary")
    return text.strip()
