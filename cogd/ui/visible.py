"""How the viewer shows untrusted text: characters that hide or reorder what is shown become visible.

Escaping (Jinja2's autoescape, :func:`markupsafe.escape`) keeps text from becoming markup, but
a repository's file names, code, memory text and prompts can also carry characters that make
text *look* other than it is: bidirectional controls that reorder it, control characters and
zero-width characters that a browser draws as nothing. The set and their visible form
(``⟨U+202E⟩``) are the foundation's (:mod:`cogd.visible`), shared with the CLI, so a name reads
the same in a terminal and on a page. This module adds the templates' hook.
"""

from __future__ import annotations

from markupsafe import Markup

from cogd.visible import HIDDEN, visible

__all__ = ["HIDDEN", "finalize", "visible"]


def finalize(value: object) -> object:
    """Jinja2's ``finalize`` hook: every string a template prints goes through :func:`visible`;
    markup built by the viewer itself (:class:`markupsafe.Markup`, the charts) and other values
    pass as they are (the charts apply :func:`visible` to their labels)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value
