"""The pieces every service shares: state scopes, compaction summaries, name and key validation,
the stored event as the codec saves it, and a light ``import relaykit.sessions``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from relaykit import AgentAction, Message
from relaykit.codec import dumps, loads
from relaykit.errors import SessionStoreError
from relaykit.sessions import (
    Session,
    SessionEvent,
    compaction_range,
    state_scope,
    validate_session_name,
    validate_state_key,
)
from relaykit.sessions.base import validate_lock_timeout


@pytest.mark.parametrize(
    ("key", "scope"),
    [
        ("app:theme", "app"),
        ("user:name", "user"),
        ("temp:draft", "temp"),
        ("cart", "session"),
        ("App:x", "session"),
        ("application", "session"),
        ("user", "session"),
        ("x:app:y", "session"),
    ],
)
def test_the_prefix_of_a_state_key_names_its_scope(key: str, scope: str) -> None:
    assert state_scope(key) == scope


def test_a_compaction_summary_is_an_exact_custom_action() -> None:
    def with_custom(custom: object) -> SessionEvent:
        return SessionEvent(action=AgentAction(custom=custom))

    assert compaction_range(with_custom({"compaction": {"start": "e1", "end": "e9"}})) == (
        "e1",
        "e9",
    )
    not_summaries = [
        SessionEvent(),
        with_custom(None),
        with_custom("compaction"),
        with_custom({"compaction": {"start": "e1"}}),
        with_custom({"compaction": {"start": "e1", "end": "e9", "extra": 1}}),
        with_custom({"compaction": {"start": "e1", "end": "e9"}, "other": 1}),
        with_custom({"compaction": {"start": "e1", "end": 9}}),
        with_custom({"compaction": {"start": "", "end": "e9"}}),
    ]
    assert [compaction_range(e) for e in not_summaries] == [None] * len(not_summaries)


def test_valid_names_are_returned_and_invalid_ones_name_the_argument() -> None:
    assert validate_session_name("s" * 255, "session_id") == "s" * 255
    assert validate_session_name("日本-🙂", "user_id") == "日本-🙂"
    with pytest.raises(SessionStoreError, match=r"^app_name must have 1 to 255 characters \(got 0"):
        validate_session_name("", "app_name")
    with pytest.raises(SessionStoreError, match=r"^user_id must be a str, not bytes"):
        validate_session_name(b"u1", "user_id")


def test_state_keys_are_validated_without_their_prefix() -> None:
    assert validate_state_key("user:" + "k" * 255) == "user"
    assert validate_state_key("temp:x") == "temp"
    for bad in ("app:", "k" * 256, "temp:" + "k" * 256, "a\x00"):
        with pytest.raises(SessionStoreError, match="state key"):
            validate_state_key(bad)


def test_lock_timeouts_are_seconds_at_least_zero() -> None:
    assert validate_lock_timeout(0) == 0.0
    assert validate_lock_timeout(2.5) == 2.5
    assert validate_lock_timeout(float("inf")) == float("inf")
    with pytest.raises(ValueError, match="timeout"):
        validate_lock_timeout(-0.1)
    with pytest.raises(TypeError, match="timeout"):
        validate_lock_timeout(None)


def test_a_session_event_is_a_registered_type_that_round_trips_through_the_codec() -> None:
    event = SessionEvent(
        id="e1",
        invocation_id="i1",
        author="agent",
        timestamp=1.5,
        message=Message.assistant("hi"),
        run_path=("root", "agent"),
        action=AgentAction(exit=True),
        error="ValueError: bad",
        state_delta={"k": (1, 2)},
    )

    data = dumps(event, kind="relaykit/session-event")

    assert b'"__type__":"relaykit.SessionEvent"' in data
    assert loads(data, kind="relaykit/session-event") == event


def test_sessions_and_events_start_empty() -> None:
    assert Session("a", "u", "s") == Session("a", "u", "s", {}, [], 0.0)
    assert SessionEvent() == SessionEvent("", "", "", 0.0, None, (), None, None, {})


def test_importing_the_sessions_package_does_not_load_sqlalchemy() -> None:
    code = (
        "import sys, relaykit.sessions as s; "
        "assert 'sqlalchemy' not in sys.modules; s.DatabaseSessionService; "
        "assert 'sqlalchemy' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
