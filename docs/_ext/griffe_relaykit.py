"""A Griffe extension for the API reference: relaykit's docstrings as mkdocstrings renders them.

relaykit's docstrings are written for ``help()`` and doctest: examples are bare ``>>>``
sessions, literal blocks follow ``::``, and dataclass fields are documented by ``#:`` comments
above them. Markdown knows none of these, so before mkdocstrings renders a docstring this
extension

* fences every doctest session (``>>>`` lines, their ``...`` continuations and their output,
  up to a blank line) as a ``pycon`` code block;
* turns a paragraph ending in ``::`` and the indented block after it into a paragraph ending in
  ``:`` and a ``python`` code block;
* gives an attribute without a docstring the ``#:`` comment lines right above it;
* links the pages of the docs a docstring names (``docs/sessions.md#storage``): the API
  reference pages are in ``docs/reference/``, so the link goes one folder up.

The source files are never changed: this only changes what the docs site shows.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_FENCE = re.compile(r"^\s*(```|~~~)")
_DOCTEST = re.compile(r"^(\s*)>>>( |$)")
_DOCS_PAGE = re.compile(r"(?<![\w/.`\[-])(?<!\]\()docs/((?:[\w-]+/)*[\w-]+\.md(?:#[\w-]+)?)")
_CODE_SPAN = re.compile(r"``.*?``|`[^`]*`")


def link_docs_pages(line: str) -> str:
    """``line`` with each ``docs/<page>.md[#anchor]`` outside code spans made a link.

    >>> link_docs_pages("Events (docs/tracing.md#spans); ``docs/x.md``")
    'Events ([docs/tracing.md#spans](../tracing.md#spans)); ``docs/x.md``'
    """
    parts: list[str] = []
    last = 0
    for code in _CODE_SPAN.finditer(line):
        parts.append(_DOCS_PAGE.sub(r"[docs/\1](../\1)", line[last : code.start()]))
        parts.append(code.group(0))
        last = code.end()
    parts.append(_DOCS_PAGE.sub(r"[docs/\1](../\1)", line[last:]))
    return "".join(parts)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def fence_docstring(text: str) -> str:
    """``text`` with its doctest sessions and ``::`` literal blocks fenced for Markdown, and
    its mentions of docs pages linked (tests/test_docs_site.py shows an example).
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            i += 1
            continue
        if in_fence:
            out.append(line)
            i += 1
            continue
        doctest = _DOCTEST.match(line)
        if doctest:
            pad = doctest.group(1)
            block = []
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) >= len(pad):
                block.append(lines[i][len(pad) :])
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [f"{pad}```pycon", *(f"{pad}{b}" for b in block), f"{pad}```"]
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(("..", ">>>")):
            # A literal block: the indented lines after a blank line.
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            base = _indent(line)
            if j < len(lines) and _indent(lines[j]) > base:
                body_pad = _indent(lines[j])
                stripped = line.rstrip()[:-1]
                out.append(stripped if stripped.strip() != ":" else "")
                out.append("")
                out.append(" " * base + "```python")
                k = j
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) >= body_pad):
                    k += 1
                while k > j and not lines[k - 1].strip():
                    k -= 1
                out += [" " * base + raw[body_pad:] for raw in lines[j:k]]
                out.append(" " * base + "```")
                i = k
                continue
        out.append(link_docs_pages(line))
        i += 1
    return "\n".join(out)


def _comment_above(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), as one text."""
    found: list[str] = []
    k = lineno - 2
    while k >= 0 and lines[k].strip().startswith("#:"):
        found.append(lines[k].strip()[2:].strip())
        k -= 1
    return "\n".join(reversed(found)) if found else None


class RelaykitDocstrings(griffe.Extension):
    """Fences doctests and literal blocks, and reads ``#:`` comments as attribute docstrings."""

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno and obj.filepath:
            try:
                lines = obj.lines_collection[obj.filepath]  # type: ignore[index]
            except KeyError:
                lines = []
            comment = _comment_above(list(lines), obj.lineno)
            if comment:
                obj.docstring = griffe.Docstring(
                    comment,
                    lineno=obj.lineno - 1,
                    parent=obj,
                    parser=agent.docstring_parser,
                    parser_options=agent.docstring_options,
                )
        if obj.docstring is not None:
            obj.docstring.value = fence_docstring(obj.docstring.value)
