"""``<private>…</private>``: the parts of a prompt the user marked as never to be stored.

A prompt is read as text and ``private`` tags, and a tag is read as leniently as a person may
type it: in any casing, with whitespace inside (``< private >``, ``</ private >``) and with
attributes (``<private note="x">``, ``<private/>``). Tags nest: the depth is counted, so the
text is private until the close that matches the first open, not the first close. An open
tag never closed hides everything after it, and a stray close outside any span is dropped.
Where a reading is in doubt it hides more, never less: an open tag ends at its first ``>``
(the rest of an attribute is then private text), and a ``<private`` with no ``>`` at all
opens a span that runs to the end.
"""

from __future__ import annotations

import re

PRIVATE_TAG = re.compile(
    r"<\s*(?P<close>/\s*)?private(?(close)\s*>|(?=[\s/>]|\Z)[^>]*(?:>|\Z))",
    re.IGNORECASE,
)
"""An open tag (``<private``, then anything up to its first ``>`` or the end) or a close
tag (``</private>``, whitespace allowed): not ``<privateer>`` nor ``<private-notes>``."""


def without_private(text: str) -> str:
    """``text`` without its private spans and without the ``private`` tags themselves.

    One pass over the tags: the text before a tag is kept when no span is open, each open
    tag goes one level deeper, each close one level back (never below zero)."""
    kept, depth, start = [], 0, 0
    for tag in PRIVATE_TAG.finditer(text):
        if depth == 0:
            kept.append(text[start:tag.start()])
        depth = max(depth - 1, 0) if tag.group("close") else depth + 1
        start = tag.end()
    if depth == 0:
        kept.append(text[start:])
    return "".join(kept)
