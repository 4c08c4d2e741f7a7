"""Run the benchmarks and write their tables to bench/results/ (``make bench``).

``python -m bench`` runs every suite; ``python -m bench sessions turns`` only those named.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

RESULTS = pathlib.Path(__file__).parent / "results"
SUITES = {
    "core": "bench.core",
    "turns": "bench.turns",
    "burst": "bench.burst",
    "sessions": "bench.sessions",
    "crash": "bench.crash",
    "live": "bench.live",
    "http": "bench.http",
}


def main() -> None:
    names = sys.argv[1:] or list(SUITES)
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        sys.exit(f"unknown suite {', '.join(unknown)}; the suites: {', '.join(SUITES)}")
    RESULTS.mkdir(exist_ok=True)
    for name in names:
        module = SUITES[name]
        # Each suite in its own process, so that peak memory is measured per suite.
        out = subprocess.run(
            [sys.executable, "-m", module], check=True, capture_output=True, text=True
        ).stdout
        (RESULTS / f"{name}.md").write_text(out)
        print(out)


if __name__ == "__main__":
    main()
