"""Table cells for names that are meant to be read and copied whole: entity ids and paths.

rich wraps a cell's text at spaces and, with ``overflow="fold"``, cuts a word that does not fit
at whatever column it reaches: ``pkg/hybrid_ranking.py::Recip`` / ``rocalRankFusion…``. An
entity id has no spaces, so at 80 columns every long id was cut mid-name. :class:`Name` breaks
only after a path or scope separator (``/``, ``::``, ``.``, a space), so each line ends on a
whole path component or name; a name wider than the column is broken after its ``_`` or ``-``,
and only a word wider still is folded. Its measurement gives the widest part as the column's
minimum, so the table takes room from the short columns (score, kind, lines) first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from cogd.visible import visible

# A part runs up to and including its separator: ``a/b.py::C.m`` → ``a/``, ``b.``, ``py::``,
# ``C.``, ``m``. Path and scope separators are where a name is broken first; the word
# separators of one name (``combine_ranked_lists``) only when one of its scopes is too wide.
_SCOPES = re.compile(r"[^/:. ]*(?:::|[/:. ])|[^/:. ]+")
_WORDS = re.compile(r"[^_\-]*[_\-]|[^_\-]+")


def name_parts(name: str) -> list[str]:
    """``name`` cut after each path or scope separator (``/``, ``::``, ``.``, a space);
    ``"".join(name_parts(n)) == n`` for every string."""
    return _SCOPES.findall(name) if name else []


def break_name(name: str, width: int) -> list[str]:
    """``name`` as lines of at most ``width`` cells (``width`` ≥ 1), broken after separators.

    Parts (:func:`name_parts`) are packed greedily, first fit. A part wider than ``width`` is
    broken after its ``_`` and ``-``, and a piece still wider is folded at ``width`` (the only
    place a name is cut inside a word). Joined, the lines give ``name`` back exactly.
    """
    width = max(1, width)
    pieces: list[str] = []
    for part in name_parts(name):
        if cell_len(part) <= width:
            pieces.append(part)
            continue
        for word in _WORDS.findall(part):
            while cell_len(word) > width:  # one word too wide for any line: folded, the last resort
                head = _head_cells(word, width)
                pieces.append(head)
                word = word[len(head):]
            pieces.append(word)
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and cell_len(line) + cell_len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    lines.append(line)
    return lines


def _head_cells(text: str, width: int) -> str:
    """The longest prefix of ``text`` at most ``width`` cells wide (at least one character)."""
    end = 1
    while end < len(text) and cell_len(text[:end + 1]) <= width:
        end += 1
    return text[:end]


class Name:
    """A rich renderable of an id or path (see the module): ``Name("a/b.py::f", style="dim")``.

    The text is shown through :func:`cogd.visible.visible` (it comes from the repository) and is
    never parsed as markup.
    """

    def __init__(self, text: str, style: str = "") -> None:
        self.text = visible(text)
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((cell_len(p) for p in name_parts(self.text)), default=0)
        whole = cell_len(self.text)
        return Measurement(min(widest, whole), whole).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self._lines(options.max_width)

    def _lines(self, width: int) -> Iterator[Text]:
        for line in break_name(self.text, width):
            yield Text(line, style=self.style, no_wrap=True, overflow="ignore", end="\n")
