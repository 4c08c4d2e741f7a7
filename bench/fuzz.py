"""A longer fuzz run of the codec: ``python -m bench.fuzz [examples]`` prints a short report.

Runs the properties of ``tests/unit/test_codec_fuzz.py`` with many more examples (20,000 in all
by default, split between the properties) and counts the outcomes: how many values
round-tripped, how many documents loaded and of what kind the refusals were. Any other outcome
— a raw exception, a badly typed value, a side effect while loading — is a failure: the report
shows the smallest example Hypothesis found and the command exits with status 1.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.test_codec_fuzz import (
    check_load,
    check_resume,
    check_round_trip,
    check_surrogates_refused,
    checkpoints,
    document,
    json_documents,
    mutated_checkpoints,
    surrogate_texts,
    values,
)

# (name, share of the examples, strategy, check returning an outcome label)
PROPERTIES: list[tuple[str, float, st.SearchStrategy[Any], Callable[[Any], str]]] = [
    ("round trip: supported values", 0.20, values, check_round_trip),
    ("round trip: checkpoints", 0.075, checkpoints, check_round_trip),
    ("unpaired surrogates are refused", 0.025, surrogate_texts, check_surrogates_refused),
    ("random JSON documents", 0.20, json_documents().map(document), check_load),
    ("random bytes", 0.05, st.binary(max_size=256), check_load),
    ("mutated real checkpoints", 0.30, mutated_checkpoints(), check_load),
    ("mutated checkpoints, then resumed", 0.15, mutated_checkpoints(), check_resume),
]


def run_property(
    strategy: st.SearchStrategy[Any], check: Callable[[Any], str], examples: int
) -> tuple[Counter[str], str | None]:
    """Outcome counts of ``check`` over ``examples`` values, and the failure if one was found."""
    counts: Counter[str] = Counter()

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def prop(value: Any) -> None:
        counts[check(value)] += 1

    try:
        prop()
    except Exception as exc:  # Hypothesis re-raises the shrunk failure: report it, go on
        return counts, f"{type(exc).__name__}: {exc}"[:2000]
    return counts, None


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(f"# Codec fuzz run: {total:,} examples\n")
    failed = False
    for name, share, strategy, check in PROPERTIES:
        examples = max(1, round(total * share))
        start = time.perf_counter()
        counts, failure = run_property(strategy, check, examples)
        seconds = time.perf_counter() - start
        status = "FAILED" if failure else "ok"
        print(f"## {name}: {status} ({sum(counts.values()):,} runs, {seconds:.1f} s)")
        for outcome, count in counts.most_common():
            print(f"- {outcome}: {count:,}")
        if failure:
            failed = True
            print(f"\n```\n{failure}\n```")
        print()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
