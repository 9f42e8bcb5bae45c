"""How the viewer shows untrusted text: characters that hide or reorder what is shown become visible.

Escaping (Jinja2's autoescape, :func:`markupsafe.escape`) keeps text from becoming markup, but
a repository's file names, code, memory text and prompts can also carry characters that make
text *look* other than it is: bidirectional controls that reorder it (``U+202E`` turns
``a\u202egnp.py`` into what reads as ``apng.py``: the "Trojan Source" trick), control
characters (escape sequences, form feeds) and zero-width characters that a browser draws as
nothing. Each such character is shown as its code point, ``⟨U+202E⟩``, so what the page shows
is what the text holds. Tabs and line ends stay: code needs them. Other characters, emoji
joiners included, are left alone.
"""

from __future__ import annotations

import re

from markupsafe import Markup

# C0 controls but tab, line feed and carriage return; DEL and the C1 controls; the bidirectional
# marks, embeddings, overrides and isolates (Unicode's Bidi_Control property, UAX #9); the
# characters drawn as nothing that can tell two look-alike names apart: soft hyphen, zero width
# space, word joiner, zero width no-break space (the joiners U+200C/U+200D shape scripts and
# emoji, and stay).
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u061c\u200b\u200e\u200f\u202a-\u202e"
                    "\u2060\u2066-\u2069\ufeff]")


def _mark(found: re.Match) -> str:
    return f"⟨U+{ord(found.group()):04X}⟩"


def visible(text: str) -> str:
    """``text`` with every :data:`HIDDEN` character replaced by ``⟨U+XXXX⟩`` (its code point
    in hex, at least four digits). Not an escape: the result is still plain text, to be escaped."""
    return HIDDEN.sub(_mark, text)


def finalize(value: object) -> object:
    """Jinja2's ``finalize`` hook: every string a template prints goes through :func:`visible`;
    markup built by the viewer itself (:class:`markupsafe.Markup`, the charts) and other values
    pass as they are (the charts apply :func:`visible` to their labels)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value
