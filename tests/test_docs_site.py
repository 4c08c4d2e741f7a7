"""The documentation site builds: ``mkdocs build --strict`` with no warning at all.

Strict mode turns every warning into a failure: a link to a missing page or anchor, a page
left out of the nav, a docstring Griffe cannot parse, a cross-reference mkdocstrings cannot
resolve. The build reads the docs and the source only; it fetches nothing from the network
(the theme's web fonts are off).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _missing() -> list[str]:
    """The packages of the ``docs`` extra that cannot be imported."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "griffe") if not _importable(m)]
    if not _importable("mkdocstrings_handlers.python"):
        missing.append("mkdocstrings-python")
    return missing


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


_MISSING = _missing()
needs_mkdocs = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"the docs extra is not installed (pip install -e '.[docs]'): missing {_MISSING}",
)


@needs_mkdocs
def test_mkdocs_build_strict_has_no_warnings(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + log
    # The reference is really generated: the Runner's entry and its docstring are on the page.
    runner_page = (tmp_path / "reference" / "runner" / "index.html").read_text(encoding="utf-8")
    assert 'id="relaykit.runner.Runner"' in runner_page
    assert 'id="relaykit.runner.Runner.invoke"' in runner_page


def _nav_pages(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(value) for value in nav.values()))
    return set()


@needs_mkdocs
def test_every_docs_page_is_in_the_nav() -> None:
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    in_nav = _nav_pages(config["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_ext" not in p.parts}
    missing = sorted(pages - in_nav)
    assert not missing, f"pages missing from the nav in mkdocs.yml (add them there): {missing}"
    assert not in_nav - pages, f"the nav names pages that do not exist: {sorted(in_nav - pages)}"


def test_reference_index_names_every_public_name() -> None:
    """``reference/index.md`` lists the whole ``relaykit`` namespace (``import relaykit as rk``)."""
    import relaykit

    text = (DOCS / "reference" / "index.md").read_text(encoding="utf-8")
    missing = [name for name in relaykit.__all__ if f"[relaykit.{name}]" not in text]
    assert not missing, f"reference/index.md does not list {missing}"


def test_the_docstring_extension_fences_doctests_and_literal_blocks_and_links_pages() -> None:
    spec = importlib.util.spec_from_file_location(
        "griffe_relaykit", DOCS / "_ext" / "griffe_relaykit.py"
    )
    if not _importable("griffe") or spec is None or spec.loader is None:
        pytest.skip("the docs extra is not installed (griffe)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (
        "Run it (docs/tracing.md#spans).\n>>> 1 + 1\n2\n\n"
        "Example::\n\n    x = 1\n    y = 2\n\nAfter ``docs/x.md``."
    )
    assert module.fence_docstring(text).split("\n") == [
        "Run it ([docs/tracing.md#spans](../tracing.md#spans)).",
        "",
        "```pycon",
        ">>> 1 + 1",
        "2",
        "```",
        "",
        "Example:",
        "",
        "```python",
        "x = 1",
        "y = 2",
        "```",
        "",
        "After ``docs/x.md``.",
    ]
