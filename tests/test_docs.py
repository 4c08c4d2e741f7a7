"""The user documentation in ``docs/`` stays true.

- Every ```python block preceded by ``<!-- test -->`` is a complete program: it runs offline
  (``ScriptedModel``) without error, and when it is followed by ``<!-- output -->`` and a
  ```text block, it prints exactly that.
- Every other ```python block at least compiles (top-level ``await`` allowed).
- Every link to a page of ``docs/`` (from ``docs/``, ``README.md`` or ``src/``) names an anchor
  that exists: an explicit ``<a id="...">`` or a heading. Pages in subfolders (``how-to/``,
  ``reference/``) count too; a link between pages is relative to the page it is on.
- Every decision the docs explain has its ``dN`` anchor, and the decisions table names them all.
- The docs speak for themselves: they never point at material outside the repository.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def _name(page: Path) -> str:
    """A page's path under ``docs/`` (``index.md``, ``how-to/postgresql.md``)."""
    return page.relative_to(DOCS).as_posix()


_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_TEST_MARK = re.compile(r"<!--\s*test\s*-->\s*\Z")
_OUTPUT_MARK = re.compile(r"\A\s*<!--\s*output\s*-->\s*\n```text\n(.*?)^```", re.S | re.M)

#: Decisions with a section of their own (the others concern features not built yet, or are
#: covered inside another section: D20 and D28 in errors-and-limits.md).
EXPLAINED = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 20, 21, 22, 23, 24, 26, 27, 28]


def _blocks() -> list[tuple[str, str, str, str | None]]:
    """(id, language, code, expected output or None) for every fenced block of the docs."""
    found: list[tuple[str, str, str, str | None]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            lang, code = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            runnable = bool(_TEST_MARK.search(text[: m.start()]))
            expected = None
            if runnable:
                out = _OUTPUT_MARK.match(text[m.end() :])
                expected = out.group(1) if out else None
            kind = "test" if runnable else lang
            found.append((f"{_name(page)}:{line}", kind, code, expected))
    return found


BLOCKS = _blocks()
RUNNABLE = [(bid, code, out) for bid, kind, code, out in BLOCKS if kind == "test"]
SNIPPETS = [(bid, code) for bid, kind, code, _ in BLOCKS if kind == "python"]


def test_the_docs_exist_and_have_runnable_examples() -> None:
    names = {_name(p) for p in PAGES}
    assert {
        "index.md",
        "agents-and-events.md",
        "trees-and-transfer.md",
        "llm-agents-and-tools.md",
        "workflows.md",
        "interrupts-and-resume.md",
        "checkpoints-and-storage.md",
        "errors-and-limits.md",
        "decisions.md",
    } <= names
    pages_with_examples = {bid.split(":")[0] for bid, _, _ in RUNNABLE}
    # The quickstart and the interrupt/resume walk-through at least.
    assert {"index.md", "interrupts-and-resume.md"} <= pages_with_examples


@pytest.mark.parametrize(("code", "expected"), [pytest.param(c, o, id=i) for i, c, o in RUNNABLE])
def test_runnable_example(code: str, expected: str | None, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    for key in [k for k in env if k.endswith("_API_KEY")]:
        del env[key]  # examples must run offline
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, f"example failed:\n{proc.stderr}"
    if expected is not None:
        assert proc.stdout.rstrip("\n").splitlines() == expected.rstrip("\n").splitlines()


@pytest.mark.parametrize("code", [pytest.param(c, id=i) for i, c in SNIPPETS])
def test_python_snippet_compiles(code: str) -> None:
    compile(code, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


# -- anchors and links ---------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """GitHub's anchor for a heading (markup and punctuation dropped, spaces to hyphens)."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors = set(re.findall(r'<a\s+id="([^"]+)"\s*>', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


ANCHORS = {_name(page): _anchors(page) for page in PAGES}


def _resolve(page: Path, path: str) -> str:
    """The page a relative link on ``page`` names, as a path under ``docs/`` (``../x.md`` from
    ``docs/index.md`` stays outside: no page has that name)."""
    target = os.path.normpath(os.path.join(os.path.dirname(_name(page)), path))
    return Path(target).as_posix()


def _links_in_docs() -> list[tuple[str, str, str]]:
    """(where, page, anchor) for every Markdown link from a docs page to a docs page."""
    links: list[tuple[str, str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"\]\(([^)\s]*)\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            if path and not path.endswith(".md"):
                continue  # a link to a source file of the repository
            where = f"{_name(page)}:{text.count(chr(10), 0, m.start()) + 1}"
            links.append((where, _resolve(page, path) if path else _name(page), anchor))
    return links


def _links_to_docs_elsewhere() -> list[tuple[str, str, str]]:
    """(where, page, anchor) for every ``docs/<page>.md#anchor`` in README.md and src/."""
    files = [ROOT / "README.md", *sorted((ROOT / "src").rglob("*.py"))]
    links: list[tuple[str, str, str]] = []
    for f in files:
        if not f.exists():
            continue
        text = f.read_text(encoding="utf-8")
        for m in re.finditer(r"docs/([\w./-]+\.md)(?:#([\w-]+))?", text):
            where = f"{f.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            links.append((where, m.group(1), m.group(2) or ""))
    return links


@pytest.mark.parametrize(
    ("where", "page", "anchor"),
    [pytest.param(*link, id=link[0]) for link in _links_in_docs() + _links_to_docs_elsewhere()],
)
def test_link_target_exists(where: str, page: str, anchor: str) -> None:
    assert page in ANCHORS, f"{where}: no page docs/{page}"
    if anchor:
        assert anchor in ANCHORS[page], f"{where}: docs/{page} has no anchor #{anchor}"


def test_every_explained_decision_has_an_anchor_and_a_row() -> None:
    everywhere = set().union(*ANCHORS.values())
    missing = [f"d{n}" for n in EXPLAINED if f"d{n}" not in everywhere]
    assert not missing, f"no section anchor for {missing}"
    table = (DOCS / "decisions.md").read_text(encoding="utf-8")
    for n in range(1, 29):
        assert re.search(rf"^\|\s*D{n}\s*\|", table, re.M), f"decisions.md has no row for D{n}"
    for n in EXPLAINED:
        assert re.search(rf"\(\w[\w-]*\.md#d{n}\)", table), f"decisions.md does not link #d{n}"


def test_each_decision_section_names_its_decision() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r'<a id="d(\d+)"></a>', text):
            after = text[m.end() : m.end() + 400]
            assert f"D{m.group(1)}" in after, (
                f"{_name(page)}: the section at #d{m.group(1)} does not name Decision D{m.group(1)}"
            )


FORBIDDEN = [
    "shared/",
    "seed",
    "spec folder",
    "semantics.md",
    "eino-reference",
    "conformance.md",
    "google-adk.md",
    "api.md",
    "peers.md",
    "../",
]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_docs_stand_on_their_own(page: Path) -> None:
    # A link from a subfolder up to another page of the docs is fine; any other "../" points
    # outside the docs.
    def inside(m: re.Match[str]) -> str:
        return "]()" if _resolve(page, m.group(1).partition("#")[0]) in ANCHORS else m.group(0)

    text = re.sub(r"\]\(((?:\.\./)+[\w.#/-]*)\)", inside, page.read_text(encoding="utf-8"))
    found = [word for word in FORBIDDEN if word in text.lower()]
    assert not found, f"{_name(page)} mentions {found}"
