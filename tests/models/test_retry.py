"""The retry layer on its own: reading server hints, and the backoff schedule."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from relaykit.models._retry import RetryPolicy, retry_after_seconds
from relaykit.models.gemini import retry_info_seconds


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "17"}, 17.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer header wins
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "tomorrow"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_values(headers: dict[str, str] | None, seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_retry_after_future_http_date_is_its_distance(http_date: Callable[[float], str]) -> None:
    seconds = retry_after_seconds({"retry-after": http_date(120)})
    assert seconds is not None and 118 <= seconds <= 120


def test_retry_after_http_date_without_zone_is_utc(http_date: Callable[[float], str]) -> None:
    date = http_date(120).replace("GMT", "-0000")
    seconds = retry_after_seconds({"retry-after": date})
    assert seconds is not None and 118 <= seconds <= 120


def test_retry_after_beyond_float_range_is_an_endless_wait() -> None:
    seconds = retry_after_seconds({"retry-after": "1" + "0" * 400})
    assert seconds == math.inf
    assert RetryPolicy(max_backoff=3600).exceeds(seconds)


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [
        ("17s", 17.0),
        ("1.5s", 1.5),
        ("0.000340s", 0.00034),
        ("17", None),
        ("-1s", None),
        (17, None),
        (None, None),
    ],
)
def test_gemini_retry_info_delay(delay: object, seconds: float | None) -> None:
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.Help", "links": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
            ],
        }
    }
    assert retry_info_seconds(body) == seconds


def test_gemini_body_without_retry_info_has_no_hint() -> None:
    assert retry_info_seconds({"error": {"code": 429, "message": "Quota exceeded"}}) is None
    assert retry_info_seconds("upstream connect error") is None


def test_backoff_stays_capped_over_thousands_of_retries() -> None:
    policy = RetryPolicy(max_retries=2000, backoff_base=0.5, max_backoff=7)
    delays = [policy.delay(retry) for retry in range(2000)]  # 2**2000 would overflow a float
    assert all(0.5 <= delay <= 7 for delay in delays)
    assert delays[4:] == [7] * 1996  # 0.5, 1, 2, 4 (with jitter), then 8 and up: capped
    assert policy.delay(0, retry_after=6.5) == 6.5  # a hint within max_backoff, waited in full


@pytest.mark.parametrize(
    "options",
    [{"max_retries": -1}, {"backoff_base": -0.5}, {"max_backoff": -1}, {"max_backoff": math.nan}],
)
def test_retry_policy_rejects_negative_settings(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(**options)  # type: ignore[arg-type]
