"""What the CLI writes to a terminal or a pipe: untrusted text shown, never interpreted.

Entity names, signatures, docstrings, paths, memory bodies and packs come from the repository,
which is untrusted input; printed raw, an ``ESC`` in a docstring is an escape sequence the
user's terminal obeys (clear the screen, write the clipboard with OSC 52, a lying OSC 8 link),
and a bidirectional override reorders what the user reads. Every character of that kind goes
through :func:`cogd.visible.visible` on its way out, at the two places all output passes:

* :class:`VisibleStream` wraps ``sys.stdout`` and ``sys.stderr`` while a command runs
  (:func:`visible_streams`), so ``click.echo``, error messages and tracebacks are covered
  without each call site remembering to;
* :class:`VisibleConsole` is rich's console for the CLI: rich writes its own escape sequences
  (colours, the progress bars' cursor moves) for the text it styles, so it writes past the
  stream filter (rich's ``rich_proxied_file`` convention) and makes the *text* visible itself,
  before layout (so tables measure what they show), and once more on every segment it renders
  (a backstop for text that did not come in as a string). A style's hyperlink is dropped: the
  CLI makes none, so one can only come from markup smuggled in with data.

``--json`` output needs nothing more: :func:`json.dumps` writes every control character as a
``\\u`` escape, and the filter leaves the ASCII of JSON as it is (bidirectional and other
non-ASCII characters are escaped too, as ``ensure_ascii`` is on).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from cogd.visible import visible


class VisibleStream:
    """A text stream that writes :func:`visible` of what it is given to ``inner``.

    A carriage return at the very end of one write is held back until the next write or
    :meth:`flush` shows whether a line feed follows it (CRLF stays, a lone CR is marked).
    Every other attribute (``encoding``, ``isatty``, ``fileno``, ``buffer``) is ``inner``'s:
    a binary write through ``buffer`` (the MCP server's JSON-RPC channel) is not filtered.
    ``rich_proxied_file`` is ``inner``: rich consoles write past the filter, as
    :class:`VisibleConsole` filters for them.
    """

    def __init__(self, inner: IO[str]):
        self.inner = inner
        self._held_cr = False

    @property
    def rich_proxied_file(self) -> IO[str]:
        return self.inner

    def write(self, text: str) -> int:
        """Write ``text`` (a str; TypeError otherwise) made visible; returns ``len(text)``."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        n = len(text)
        if self._held_cr:
            text, self._held_cr = "\r" + text, False
        if text.endswith("\r"):
            text, self._held_cr = text[:-1], True
        if text:
            self.inner.write(visible(text))
        return n

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Write a held carriage return (as its mark: no line feed came) and flush ``inner``."""
        if self._held_cr:
            self._held_cr = False
            self.inner.write(visible("\r"))
        self.inner.flush()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@contextmanager
def visible_streams() -> Iterator[None]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`VisibleStream` for the block (not
    twice: a stream already wrapped stays as it is); put the previous streams back after it,
    flushing what a wrapper held."""
    before = sys.stdout, sys.stderr
    wrapped = [s if s is None or isinstance(s, VisibleStream) else VisibleStream(s) for s in before]
    sys.stdout, sys.stderr = wrapped
    try:
        yield
    finally:
        for stream in wrapped:
            if isinstance(stream, VisibleStream) and stream not in before:
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed pipe: nothing more can be shown
                    pass
        sys.stdout, sys.stderr = before


def visible_segments(segments: Iterable[Segment]) -> Iterator[Segment]:
    """``segments`` with their text made visible and any hyperlink taken off their style;
    control segments (rich's own cursor moves) pass as they are."""
    for segment in segments:
        if segment.control:
            yield segment
            continue
        style = segment.style
        if style is not None and style.link:
            style = style.update_link(None)
        yield Segment(visible(segment.text), style)


def _own_file(console: Console) -> IO[str]:
    """The stream rich would write to, past a :class:`VisibleStream`. rich unwraps one
    ``rich_proxied_file``; while a live display redirects ``sys.stdout`` the chain is its
    FileProxy, then our filter, so the filter is taken off here (the text is made visible by
    the console itself)."""
    file = Console.file.fget(console)
    return file.inner if isinstance(file, VisibleStream) else file


class VisibleConsole(Console):
    """A rich :class:`~rich.console.Console` that shows untrusted text visibly (see the module)."""

    file = property(_own_file, Console.file.fset)

    def render_str(self, text: str, **kwargs) -> Text:
        """rich's :meth:`~rich.console.Console.render_str` of ``visible(text)``: the marks are in
        place before markup is parsed and the text is measured."""
        return super().render_str(visible(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        """rich's :meth:`~rich.console.Console.render`, its segments through :func:`visible_segments`."""
        return visible_segments(super().render(renderable, options))
