"""Normalised content: the form two statements of one claim share, and its hash (the tombstone key).

Folded: Unicode compatibility forms (NFKC), case (``casefold``), punctuation
and symbols (every Unicode ``P*`` and ``S*`` character is dropped, so ``8,000``
is ``8000`` and ``don't`` is ``dont``), invisible format characters (``Cf``,
dropped), and whitespace (runs of it, control
characters included, collapse to one space; ends trimmed). So ``"Never  call
parse_date() on UTC!"`` and ``"never call PARSE_DATE on utc"`` are one claim.
"""

from __future__ import annotations

import hashlib
import unicodedata


def normalise(text: str) -> str:
    """``text`` folded as described above; ``""`` for text with no letters or digits."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # Format characters (Cf: zero-width space, soft hyphen, joiners) are invisible: dropped, or
    # "Na\u200bN" would be a different claim from "NaN" and slip past its tombstone.
    chars = ["" if unicodedata.category(c)[0] in "PS" or unicodedata.category(c) == "Cf"
             else " " if unicodedata.category(c)[0] in "ZC" else c
             for c in folded]
    return " ".join("".join(chars).split())


def content_hash(text: str) -> str:
    """``sha256:<hex>`` of :func:`normalise` (``text``): the tombstone of a claim."""
    return "sha256:" + hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


def redaction_hash(text: str) -> str:
    """``sha256:<hex>`` of the exact text: what erasure leaves in place of an event's text."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
