"""Untrusted text shown as it is: characters that act on a terminal, or hide or reorder text, become visible.

A repository's file names, identifiers, docstrings and code, and memory text, are untrusted
input, and every place that shows them to a person (the CLI on a terminal, the web viewer, the
context pack an agent's transcript shows) shows them through :func:`visible`. Three kinds of
character are at stake:

* control characters: C0 (``ESC`` starts the escape sequences that clear the screen, move the
  cursor, set the window title, write the clipboard (OSC 52) or make a link whose text lies
  (OSC 8)), ``DEL`` and C1 (``U+009B`` is a one-character CSI on some terminals); a lone
  carriage return rewinds the line, so what follows overwrites what came before;
* bidirectional controls (Unicode's Bidi_Control property, UAX #9), which reorder what is
  shown: ``a\\u202egnp.py`` reads as ``apng.py`` (the "Trojan Source" trick);
* characters drawn as nothing, which tell two look-alike names apart or carry text a reader
  cannot see (soft hyphen, zero width space, word joiner, byte order mark, the invisible
  operators, and the tag characters ``U+E0000``–``U+E007F`` that spell ASCII no one sees but a
  language model reads); lone surrogates, which no output encoding can write, join them.

Each is replaced by its code point, ``⟨U+001B⟩``, so what is shown is what the text holds, and
nothing of it is interpreted. Tab and line feed stay (code needs them), and so does a carriage
return right before a line feed (a CRLF line end). The zero width joiners ``U+200C``/``U+200D``
shape scripts and emoji, and stay. The replacement is plain text, never an escape of any
markup: HTML and rich's markup are escaped on top of it by their callers.

Standard library only: the CLI, the viewer and the pack renderer share this one definition.
"""

from __future__ import annotations

import re

#: Every character :func:`visible` replaces (the lone carriage return is matched as ``\r`` not
#: followed by ``\n``).
HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"   # C0 but tab, line feed and carriage return; DEL; C1
    "\xad\u061c\u180e\u200b\u200e\u200f"     # soft hyphen, Arabic letter mark, Mongolian vowel separator, ZWSP, LRM, RLM
    "\u202a-\u202e\u2060-\u2064\u2066-\u2069"  # embeddings/overrides, word joiner, invisible operators, isolates
    "\ufeff\ufff9-\ufffb\ud800-\udfff"         # BOM, interlinear annotations, lone surrogates
    "\U000e0000-\U000e007f]"                   # tag characters
    "|\r(?!\n)"
)


def mark(char: str) -> str:
    """The visible form of one hidden character: ``⟨U+XXXX⟩``, its code point in upper-case hex,
    at least four digits (``mark("\\x1b") == "⟨U+001B⟩"``, ``mark("\\U000e0041") == "⟨U+E0041⟩"``)."""
    return f"⟨U+{ord(char):04X}⟩"


def _mark(found: re.Match) -> str:
    return mark(found.group())


def visible(text: str) -> str:
    """``text`` with every :data:`HIDDEN` character replaced by :func:`mark` of it.

    ``text``: any str (raises TypeError for anything else). The result is plain text, longer
    than ``text`` by 7 or 8 characters per hidden one; text without any comes back unchanged
    (the same object). Idempotent: the marks are themselves plain characters.
    """
    if text.isprintable():  # one line, nothing hidden: every HIDDEN character is non-printable to Python
        return text
    return HIDDEN.sub(_mark, text)
