"""The nesting bound of the codec and the wording of the errors every part of it raises.

Loading reads documents an attacker may control, so an error names what was wrong — a marker, a
type or field name, shortened — and never a stored value.
"""

from __future__ import annotations

import re

from relaykit.errors import SerializationError

__all__ = ["MAX_DEPTH", "corrupt", "quote", "too_deep"]

#: Most levels of containers (lists, dicts, tuples, sets, registered objects, markers) a saved
#: value may nest. A checkpoint takes about ten levels and each agent tool nested in it about
#: seven more; the bound keeps hostile documents far from Python's recursion limit (a level is
#: at most three JSON levels and three Python frames).
MAX_DEPTH = 100


def too_deep() -> SerializationError:
    """The error for a value or document nested deeper than ``MAX_DEPTH``."""
    return SerializationError(
        f"the data is nested deeper than {MAX_DEPTH} levels (lists, dicts, tuples, sets and "
        "registered objects each count one level; is it cyclic?)"
    )


#: What a name a class or a field can be registered under looks like (dotted identifiers).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)*")


def quote(text: str) -> str:
    """A name read from a document, for an error message: quoted when it looks like a name
    (at most 80 characters), else only described -- a corrupt or hostile document's text never
    reaches a message.

    >>> quote("relaykit.Missing")
    "'relaykit.Missing'"
    >>> quote("<script>alert(1)</script>")
    'a name of 25 characters that no class could have'
    """
    if len(text) <= 80 and _NAME.fullmatch(text):
        return repr(text)
    return f"a name of {len(text)} characters that no class could have"


def corrupt(what: str) -> SerializationError:
    """The error for a document that ``encode`` cannot have written; ``what`` names no value."""
    return SerializationError(f"corrupt data: {what}")
