"""Run every benchmark and write the tables to bench/results/ (``make bench``)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

RESULTS = pathlib.Path(__file__).parent / "results"
SUITES = {"core": "bench.core", "turns": "bench.turns", "burst": "bench.burst"}


def main() -> None:
    RESULTS.mkdir(exist_ok=True)
    for name, module in SUITES.items():
        # Each suite in its own process, so that peak memory is measured per suite.
        out = subprocess.run(
            [sys.executable, "-m", module], check=True, capture_output=True, text=True
        ).stdout
        (RESULTS / f"{name}.md").write_text(out)
        print(out)


if __name__ == "__main__":
    main()
