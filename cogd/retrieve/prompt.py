"""Prompt analysis: a prompt as people write it, split into the parts each retriever suits.

A bug report is a paragraph of symptoms, a traceback, a code block reproducing the
problem, an expected-vs-actual output. Each of those says something different about
where the code is, so retrieval treats them apart (docs/architecture.md, "Prompt
analysis"):

* **frames** — traceback frames (Python's ``File "x.py", line 3, in f``, IPython's
  ``x.py in f(...)``, pytest's ``x.py:3: in f``, JavaScript's ``at f (x.js:3:1)``,
  Java's ``at a.b.C.f(C.java:3)``, Go's ``x.go:3 +0x1d``, Rust's ``at src/x.rs:3:5``)
  name a file, a line and a function: they resolve straight to entities;
* **paths** — file paths mentioned anywhere (``sphinx/ext/napoleon.py``, ``conf.py``);
* **identifiers** — dotted names, CamelCase and snake_case words, call names, and
  anything in backticks that looks like code;
* **errors** — exception lines (``TypeError: ...``) and quoted messages, and other
  string literals;
* **code** — fenced (```) or indented blocks (the reproducer);
* **prose** — everything else, for the embedding.

Standard library only and cheap: one pass of precompiled regular expressions, well
under a millisecond for a 10 KB prompt (``scripts/bench_prompt.py`` measures it).
Nothing here touches the index; resolution of frames and paths to entities is
:mod:`cogd.retrieve.parts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_PROMPT_CHARS = 100_000  # a pasted log longer than this is read by its head and its tail
MAX_FRAMES = 64
MAX_ITEMS = 200  # per kind of part: paths, identifiers, literals

# File extensions of source and project files a prompt may name.
_EXT = (r"(?:py|pyi|pyx|pxd|js|mjs|cjs|jsx|ts|tsx|java|kt|scala|go|rs|c|h|cc|cpp|cxx|hpp|hh|m|mm|rb|php|cs|"
        r"swift|lua|sh|bash|pl|r|jl|ex|exs|erl|hs|ml|clj|dart|vue|svelte|toml|cfg|ini|rst|md|txt|json|ya?ml|"
        r"html?|css|scss|xml|sql|proto|gradle|mk|cmake|in)")
# One token pass finds words, dotted names, calls (a trailing ``(``) and paths alike.
_TOKEN = re.compile(r"[\w~][\w./~\-+@]*\(?")
_PATH_TOKEN = re.compile(r"\.(?:" + _EXT[3:-1] + r")$")
_IDENT = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_PY_FRAME = re.compile(r'^\s*File "([^"\n]+)", line (\d+)(?:, in ([^\s\n]+))?', re.M)
_IPY_FRAME = re.compile(r"^(\S+\.pyx?) in ([\w<>.]+)\(", re.M)
_IPY_ARROW = re.compile(r"^-*> ?(\d+)\s", re.M)
_PYTEST_FRAME = re.compile(r"^(\S+\.pyx?):(\d+):(?: in ([\w<>.]+))?", re.M)
_JS_FRAME = re.compile(r"^\s*at (?:(?:async )?([\w$.<>\[\] ]+?) \()?(?:file://)?([^\s()]+\.(?:[cm]?js|jsx|tsx?|vue)):(\d+)(?::\d+)?\)?\s*$", re.M)
_JAVA_FRAME = re.compile(r"^\s*at ((?:[\w$]+\.)+)([\w$<>]+)\(([\w$]+\.(?:java|kt|scala|groovy)):(\d+)\)", re.M)
_GO_FRAME = re.compile(r"^([\w./\-*()]+)\.([\w]+)\([^\n]*\)\n\s+(\S+\.go):(\d+)", re.M)
_RUST_FRAME = re.compile(r"^\s*\d+: ([\w:<>]+)\n\s+at (\S+\.rs):(\d+)(?::\d+)?", re.M)
_FENCE_OPEN = re.compile(r" {0,3}(```+|~~~+)")  # a fence line; it closes at the same run alone on a line
_ERROR_LINE = re.compile(
    r"^\s*(?:Exception in thread \"[^\"\n]*\" |Caused by: |Uncaught |panic: )?((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Warning|Fault|Failure|Exit|Interrupt))"
    r"(?::[ \t]*([^\n]{0,300}))?$", re.M)
_URLS = tuple(re.compile(p + r"[^\s<>()\[\]\"']+") for p in (r"https?://", r"ftp://", r"www\."))
# A logged warning or error: "WARNING: msg", "ERROR: msg", "path.ext:12: WARNING: msg", "x.rst:3:msg".
_LEVEL = r"(?:WARNING|ERROR|CRITICAL|SEVERE|FATAL|warning|error)(?:\s*\(\w+\))?:\s*"
_LOGGED = re.compile(r"^\s*(?:\S+:\d+:\s*(?:" + _LEVEL + r")?|" + _LEVEL + r")([A-Za-z][^\n]{8,300})$", re.M)
# Lines of a traceback outside a code block: its header, frame lines and the source line under each.
_TRACE_LINE = re.compile(r'^(?:Traceback \(most recent call last\):?|\s*File "[^\n]*|\s+at \S[^\n]*|'
                         r'\S+\.py(?:x)?(?::\d+:| in )[^\n]*|-*> ?\d+[^\n]*)\n?', re.M)
# Quoted strings, one pattern per quote: a pattern that opens with a literal character is
# scanned for it at C speed; an alternation (or a leading class, lookbehind, ``^`` or
# repeat) makes the engine try every position, ten times slower on a 10 KB report.
_DOUBLE_QUOTED = re.compile(r'"([^"\n]{3,200})"')
_SINGLE_QUOTED = re.compile(r"'([^'\n]{3,200})'")
# `code` or ``code``, not a fence: the opening run's length is checked in Python (see _ticked).
_BACKTICK = re.compile(r"`(`?)([^`\n]{2,120})`(`?)(?!`)")
_JS_AT = re.compile(r"\n[ \t]*at ")  # where a stack line "  at f (x.js:3:1)" may start
_JS_AT_FIRST = re.compile(r"\A[ \t]*at ")  # ... or the prompt's first line
_CAMEL = re.compile(r"^_*[A-Za-z][a-z0-9]*[A-Z]\w*$|^_*[A-Z]{2,}[a-z]\w*$")
_SNAKE = re.compile(r"^_*[A-Za-z][A-Za-z0-9]*_\w*[A-Za-z0-9]$|^__\w+__$")
_TEST_WORD = re.compile(r"(^|[/._])tests?([/._]|$)|^test_|_test$|^Test[A-Z]|conftest", re.I)

# Words that look like identifiers in prose but name nothing in a code base.
_NOT_IDENTIFIERS = frozenset("e.g i.e etc.pp vs.".split())

_ERROR_NEEDLES = ("Error", "Exception", "Warning", "Fault", "Failure", "Exit", "Interrupt")
_LOGGED_NEEDLES = ("WARNING", "ERROR", "CRITICAL", "SEVERE", "FATAL", "warning", "error", re.compile(r":\d+:"))
_TRACE_NEEDLES = ("Traceback (", 'File "', re.compile(r"\n[ \t]+at "), re.compile(r"\A[ \t]+at "),
                  ".py:", ".py in ", ".pyx:", ".pyx in ", re.compile(r"\n-*> ?\d"), re.compile(r"\A-*> ?\d"))


def _line_starts(text: str, needles) -> list[int]:
    """Offsets of the starts of the lines of ``text`` holding any of ``needles`` (strings,
    found with ``str.find``, or compiled patterns), ascending, without repeats.

    The line patterns here are anchored at a line start (``^`` with ``re.M``), which the
    regular-expression engine can only test at every position of the text; matching them
    only at the starts of the lines a cheap substring search picked is what keeps a 10 KB
    report's analysis well under a millisecond (``scripts/bench_prompt.py``)."""
    starts: set[int] = set()
    for needle in needles:
        if isinstance(needle, str):
            i = text.find(needle)
            while i >= 0:
                starts.add(text.rfind("\n", 0, i) + 1)
                i = text.find(needle, i + len(needle))
        else:
            for m in needle.finditer(text):
                starts.add(text.rfind("\n", 0, m.end() - 1) + 1)  # a match may open with its "\n"
    return sorted(starts)


def _line_matches(pattern: re.Pattern, text: str, needles) -> list[re.Match]:
    """``pattern``'s matches that begin at the start of a line holding one of ``needles``
    (:func:`_line_starts`), in text order, none overlapping an earlier one."""
    out: list[re.Match] = []
    end = 0
    for start in _line_starts(text, needles):
        if start < end:
            continue
        m = pattern.match(text, start)
        if m:
            out.append(m)
            end = max(m.end(), start + 1)
    return out


def _remove(text: str, matches: list[re.Match]) -> str:
    """``text`` without the spans of ``matches`` (ascending, not overlapping): ``pattern.sub("", …)``
    for the matches :func:`_line_matches` found."""
    if not matches:
        return text
    pieces, last = [], 0
    for m in matches:
        pieces.append(text[last:m.start()])
        last = m.end()
    pieces.append(text[last:])
    return "".join(pieces)


def _literals(text: str) -> list[str]:
    """Quoted strings in order of appearance, as one alternation of both quotes would find them
    (leftmost first, none inside another: ``"it's"`` holds no single-quoted string), by two
    literal-first searches, each repeated only when the other's match passed it."""
    out: list[str] = []
    patterns = [p for p, quote in ((_DOUBLE_QUOTED, '"'), (_SINGLE_QUOTED, "'")) if quote in text]
    pos = 0
    nexts = [p.search(text) for p in patterns]
    while True:
        live = [m for m in nexts if m is not None]
        if not live:
            return out
        first = min(live, key=lambda m: m.start())
        out.append(first.group(1))
        pos = first.end()
        nexts = [m if m is not None and m.start() >= pos else (p.search(text, pos) if m is not None else None)
                 for p, m in zip(patterns, nexts)]


def _ticked(text: str) -> list[str]:
    """The text of inline code spans: `x` or ``x``, not a run of three backticks (a fence)."""
    out = []
    for m in _BACKTICK.finditer(text):
        if m.group(1) != m.group(3) or (m.start() and text[m.start() - 1] == "`"):
            continue
        out.append(m.group(2))
    return out


@dataclass(frozen=True)
class Frame:
    """One traceback frame: ``path`` as printed, ``line`` (1-based, 0 = unknown), ``function``
    ('' = unknown), ``number`` (1-based, in the order printed) and ``form`` (``python``,
    ``ipython``, ``pytest``, ``js``, ``java``, ``go``, ``rust``)."""

    path: str
    line: int
    function: str
    number: int
    form: str

    @property
    def about_tests(self) -> bool:
        """True when the frame is in a test (its path or function says so)."""
        return bool(_TEST_WORD.search(self.path.rsplit("/", 1)[-1]) or _TEST_WORD.search(self.function)
                    or "/tests/" in "/" + self.path or "/test/" in "/" + self.path)


@dataclass
class PromptParts:
    """A prompt's parts, each in order of first appearance, without repeats.

    ``frames`` innermost-last as printed; ``paths`` every file path named (frames'
    paths included); ``identifiers`` names of code; ``errors`` exception lines as
    ``Type: message``; ``messages`` the text of errors and of logged warnings (``WARNING: …``,
    ``file.rst:12: …``), words a program printed and so likely spelled in its source;
    ``symbols`` hyphenated names in the prose or in backticks (a message symbol
    ``unused-import``, an option ``--ignore-paths``: spelled as strings in the code, split by
    the index's tokenizer); ``printed_symbols`` those only in parentheses of pasted output
    (a linter's ``(line-too-long)``: about the reporter's code as often as about this one);
    ``literals`` quoted strings; ``code`` the code blocks' text;
    ``prose`` the text outside code blocks and tracebacks; ``chars`` the prompt's size.
    """

    frames: list[Frame] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    printed_symbols: list[str] = field(default_factory=list)
    literals: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    prose: str = ""
    chars: int = 0

    @property
    def structured(self) -> bool:
        """True when the prompt carries more than words: a frame, a path, a code block or an error."""
        return bool(self.frames or self.paths or self.code or self.errors)

    def about_tests(self) -> bool:
        """True when the prompt is about a test: a test file path, a test's name, or a frame in a test."""
        return (any(f.about_tests for f in self.frames)
                or any(_TEST_WORD.search(p.rsplit("/", 1)[-1]) or "tests/" in p for p in self.paths)
                or any(_TEST_WORD.search(i.rsplit(".", 1)[-1]) for i in self.identifiers))


def _distinct(items, limit: int = MAX_ITEMS) -> list[str]:
    out: dict[str, None] = {}
    for item in items:
        if item and item not in out:
            out[item] = None
            if len(out) >= limit:
                break
    return list(out)


def _frames(text: str) -> list[Frame]:
    """Every frame of every known form, in text order (a pattern runs only when a cheap
    substring test says its form may be present: most prompts have no traceback)."""
    found: list[tuple[int, str, int, str, str]] = []
    for m in (_line_matches(_PY_FRAME, text, ('File "',)) if 'File "' in text else ()):
        found.append((m.start(), m.group(1), int(m.group(2)), m.group(3) or "", "python"))
    ipython = _line_matches(_IPY_FRAME, text, (".py in ", ".pyx in ")) if ".py in " in text or ".pyx in " in text else []
    for n, m in enumerate(ipython):
        # IPython marks the frame's current line with an arrow a few lines below its header.
        arrow = _IPY_ARROW.search(text, m.end(), m.end() + 2000)
        nxt = ipython[n + 1] if n + 1 < len(ipython) else None
        line = int(arrow.group(1)) if arrow and (nxt is None or arrow.start() < nxt.start()) else 0
        found.append((m.start(), m.group(1), line, m.group(2), "ipython"))
    for m in (_line_matches(_PYTEST_FRAME, text, (".py:", ".pyx:")) if ".py:" in text or ".pyx:" in text else ()):
        found.append((m.start(), m.group(1), int(m.group(2)), m.group(3) or "", "pytest"))
    stack = _JS_AT.search(text) is not None or text.lstrip(" \t").startswith("at ")
    for m in (_line_matches(_JS_FRAME, text, (_JS_AT, _JS_AT_FIRST)) if stack else ()):
        found.append((m.start(), m.group(2), int(m.group(3)), (m.group(1) or "").strip(), "js"))
    for m in (_line_matches(_JAVA_FRAME, text, (_JS_AT, _JS_AT_FIRST))
              if stack and (".java:" in text or ".kt:" in text) else ()):
        package = m.group(1).rstrip(".")
        # a.b.C.method(C.java:3): the file sits in the package's directory.
        folder = "/".join(package.split(".")[:-1])
        path = f"{folder}/{m.group(3)}" if folder else m.group(3)
        found.append((m.start(), path, int(m.group(4)), f"{package.rsplit('.', 1)[-1]}.{m.group(2)}", "java"))
    for m in (_GO_FRAME.finditer(text) if ".go:" in text else ()):
        found.append((m.start(), m.group(3), int(m.group(4)), m.group(2), "go"))
    for m in (_RUST_FRAME.finditer(text) if ".rs:" in text else ()):
        found.append((m.start(), m.group(2), int(m.group(3)), m.group(1).rsplit("::", 1)[-1], "rust"))
    found.sort(key=lambda f: f[0])
    out: list[Frame] = []
    seen: set[tuple[str, int, str]] = set()
    for _offset, path, line, function, form in found:
        key = (path, line, function)
        if key in seen:
            continue
        seen.add(key)
        out.append(Frame(path, line, function, len(out) + 1, form))
        if len(out) >= MAX_FRAMES:
            break
    return out


def _looks_like_code_name(word: str) -> bool:
    # Callers skip words with no "_" and no capital after the first letter: neither form matches them.
    return bool(_CAMEL.match(word) or _SNAKE.match(word))


def _fences(text: str) -> list[tuple[int, int, str]]:
    """Fenced code blocks as ``(start, end, content)``: from a line opening with up to three
    spaces and a run of three or more backticks or tildes (its info string after) to the next
    line holding that same run alone, or the end of the text; ``content`` the lines between.
    Only lines holding a fence's characters are looked at (:func:`_line_starts`)."""
    starts = _line_starts(text, ("```", "~~~"))
    out: list[tuple[int, int, str]] = []
    done = 0
    for n, start in enumerate(starts):
        if start < done:
            continue
        eol = text.find("\n", start)
        opener = _FENCE_OPEN.match(text, start, eol) if eol >= 0 else None
        if opener is None:
            continue
        run = opener.group(1)
        end, content = len(text), text[eol + 1:]
        for close in starts[n + 1:]:
            if close <= eol:
                continue
            line_end = text.find("\n", close)
            line = text[close:line_end if line_end >= 0 else len(text)]
            stripped = line.lstrip(" ")
            if len(line) - len(stripped) <= 3 and stripped.rstrip(" \t") == run:
                end, content = close + len(line), text[eol + 1:close]
                break
        out.append((start, end, content))
        done = end + 1 if end < len(text) else end
    return out


def _blocks(text: str) -> tuple[list[str], str]:
    """``(code blocks, prose)``: fenced blocks, then indented ones (four spaces or a tab after
    a blank line) in what is left; the rest is prose."""
    code: list[str] = []
    spans = [text]
    if "```" in text or "~~~" in text:
        spans = []
        last = 0
        for start, end, content in _fences(text):
            spans.append(text[last:start])
            code.append(content)
            last = end
        spans.append(text[last:])
    prose: list[str] = []
    for span in spans:
        if "\n    " not in span and "\n\t" not in span:
            prose.append(span)
            continue
        indented: list[str] = []
        blank = True
        for line in span.split("\n"):
            if (line.startswith("    ") or line.startswith("\t")) and (blank or indented):
                indented.append(line)
                continue
            if indented:
                code.append("\n".join(indented))
                indented = []
            blank = not line.strip()
            prose.append(line)
        if indented:
            code.append("\n".join(indented))
    return [c for c in code if c.strip()], "\n".join(prose)


def _names(text: str, parts: PromptParts, ticked: list[str]) -> None:
    """Fill ``parts.paths`` and ``parts.identifiers`` from the frames, backticks and one token pass."""
    paths: list[str] = [f.path for f in parts.frames]
    identifiers: list[str] = [f.function for f in parts.frames if f.function and not f.function.startswith("<")]
    for inner in ticked:
        inner = inner.strip()
        if inner.endswith("()"):
            inner = inner[:-2]
        if _IDENT.fullmatch(inner) and not _PATH_TOKEN.search(inner):
            identifiers.append(inner)
    for token in dict.fromkeys(_TOKEN.findall(text)):
        call = token.endswith("(")
        if call:
            token = token[:-1]
        token = token.rstrip(".-")
        if not token:
            continue
        if ("/" in token or "." in token) and _PATH_TOKEN.search(token):
            paths.append(token)
        elif "." in token:
            if "/" not in token and _IDENT.fullmatch(token) and token.lower() not in _NOT_IDENTIFIERS:
                identifiers.append(token)
        elif call or (("_" in token or not token[1:].islower()) and _looks_like_code_name(token)):
            if _IDENT.fullmatch(token):
                identifiers.append(token)
    seen_paths: set[str] = set()
    kept: list[str] = []
    for path in paths:
        key = path.lstrip("~./")  # "/usr/x.py" printed by a frame and "usr/x.py" found as a token
        if path.startswith("<") or key in seen_paths:
            continue
        seen_paths.add(key)
        kept.append(path)
    parts.paths = kept[:MAX_ITEMS]
    parts.identifiers = _distinct(i for i in identifiers if len(i) > 2 and not i.startswith("__main"))



def _printed(text: str, prose: str, parts: PromptParts, ticked: list[str]) -> None:
    """Fill ``parts.errors``, ``messages``, ``symbols``, ``printed_symbols`` and ``literals``."""
    if "Error" in text or "Exception" in text or "Warning" in text or "Fault" in text or "Failure" in text:
        errors = []
        for m in _line_matches(_ERROR_LINE, text, _ERROR_NEEDLES):
            message = (m.group(2) or "").strip()
            errors.append(f"{m.group(1)}: {message}" if message else m.group(1))
        parts.errors = _distinct(errors)
    messages = [e.split(": ", 1)[1] for e in parts.errors if ": " in e]
    if ":" in text:
        for m in _line_matches(_LOGGED, text, _LOGGED_NEEDLES):
            if not _PY_FRAME.match(m.group(0)):
                messages.append(m.group(1).strip())
    parts.messages = _distinct(messages, 40)
    if "-" in text:
        # Symbols in prose, in backticks or in parentheses (a linter's "(unused-import)"); not
        # the class names of pasted HTML or the flags of a shell session inside code blocks.
        spans = [prose, *ticked]
        parts.symbols = _distinct((name for span in spans for name in _kebab_words(span)), 40)
        parts.printed_symbols = _distinct((m.group(1).lstrip("-") for m in _PAREN_KEBAB.finditer(text)
                                           if m.group(1) not in parts.symbols), 40)
    if '"' in text or "'" in text:
        parts.literals = _distinct(_literals(text))


def analyze(prompt: str) -> PromptParts:
    """Split ``prompt`` into its parts (see the module docstring).

    One tokenising pass classifies words, dotted names, calls and paths; the frame
    patterns run only when a cheap substring test says their form may be present.

    Args:
        prompt: the user's text, any size; only the first and last ``MAX_PROMPT_CHARS / 2``
            characters of a longer one are read (a traceback sits at the end of a log).

    Returns:
        :class:`PromptParts`. Never raises on any string.
    """
    text = prompt.replace("\r\n", "\n").replace("\r", "\n") if "\r" in prompt else prompt
    if len(text) > MAX_PROMPT_CHARS:
        half = MAX_PROMPT_CHARS // 2
        text = text[:half] + "\n" + text[-half:]
    parts = PromptParts(chars=len(prompt))
    if "://" in text or "www." in text:  # a link's words name another site, not this code
        for url in _URLS:
            text = url.sub(" ", text)
    parts.frames = _frames(text)
    parts.code, prose = _blocks(text)
    if parts.frames:
        prose = _remove(prose, _line_matches(_TRACE_LINE, prose, _TRACE_NEEDLES))
    if "Error" in prose or "Exception" in prose or "Warning" in prose:
        prose = _remove(prose, _line_matches(_ERROR_LINE, prose, _ERROR_NEEDLES))
    parts.prose = prose.strip()

    ticked = _ticked(text) if "`" in text else []
    _names(text, parts, ticked)
    _printed(text, prose, parts, ticked)
    return parts


# What a pasted snippet defines for itself: ``class Point``, ``def end(``, ``function f(``,
# ``self.width =``, and an indented ``start: Point`` (a class body's annotated attribute). Not a
# module-level ``name = …``: a pasted conf.py or settings file assigns the project's own options.
_OWN_DEFINITION = re.compile(
    r"^[ \t]*(?:(?:async[ \t]+)?def|class|function|func|fn|struct|interface)[ \t]+([A-Za-z_]\w*)"
    r"|\bself\.([A-Za-z_]\w*)[ \t]*=(?!=)"
    r"|^[ \t]+([A-Za-z_]\w*)[ \t]*:[ \t]*[A-Za-z_][\w\[\]., |]*[ \t]*(?:=[^=\n][^\n]*)?$", re.M)


def own_names(parts: PromptParts) -> frozenset[str]:
    """Names the prompt's code blocks define for themselves and its prose never spells: the
    reporter's example (``class Point``, ``def end``, ``self.width = …``), not this project's
    code, however often the example repeats them. A name the prose also uses (``overriding
    `visit_call```) is kept: the reporter is talking about it. Empty without code blocks, so a
    one-line prompt costs nothing. Case is kept (``Point``); :func:`cogd.retrieve.hybrid.term_boosts`
    lower-cases. Never raises."""
    if not parts.code:
        return frozenset()
    names: set[str] = set()
    for block in parts.code:
        for m in _OWN_DEFINITION.finditer(block):
            name = m.group(1) or m.group(2) or m.group(3)
            if name and not name.startswith("__"):
                names.add(name)
    if not names:
        return frozenset()
    spelled = set(re.findall(r"[A-Za-z_]\w*", parts.prose))
    return frozenset(n for n in names if n not in spelled)


_KEBAB = re.compile(r"-{0,2}([a-z][a-z0-9]+(?:-[a-z][a-z0-9]*)+)")


def _kebab_words(text: str) -> list[str]:
    """Hyphenated lower-case names among the whitespace-separated words of ``text`` (quotes,
    brackets and punctuation around them stripped; ``--`` of an option dropped). Only the
    words around a hyphen are cut out and matched: a scanning pattern costs five times more on
    a 10 KB report, and splitting every word twice more."""
    out = []
    end = 0
    i = text.find("-")
    while i >= 0:  # the words around each hyphen, not every word of the text
        if i >= end:
            start = i
            while start and not text[start - 1].isspace():
                start -= 1
            end = i + 1
            while end < len(text) and not text[end].isspace():
                end += 1
            match = _KEBAB.fullmatch(text[start:end].strip("`'\"()[]{},.;:!?"))
            if match:
                out.append(match.group(1))
        i = text.find("-", max(i + 1, end))
    return out
_PAREN_KEBAB = re.compile(r"\((-{0,2}[a-z][a-z0-9]+(?:-[a-z][a-z0-9]*)+)\)")
_MESSAGE_WORDS = re.compile(r"[A-Za-z][A-Za-z_]*")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`|\S*[\d/\\.<>=]\S*")


def message_phrases(message: str, min_words: int = 3, max_phrases: int = 3) -> list[str]:
    """Runs of plain words in a printed message, as a program's source would spell them.

    Quoted values, numbers, paths and other variable parts (what a ``%s`` or ``{}`` filled in)
    cut the message into runs; runs of at least ``min_words`` words are kept, longest first.
    ``"duplicate term description of mysql, other instance in glossary"`` →
    ``["duplicate term description of mysql", "other instance in glossary"]``.
    """
    runs = []
    for chunk in re.split(r"[,;:()\[\]{}!?]|\s-\s", _QUOTED.sub("|", message)):
        for piece in chunk.split("|"):
            words = _MESSAGE_WORDS.findall(piece)
            if len(words) >= min_words:
                runs.append(" ".join(words[:8]))
    return sorted(dict.fromkeys(runs), key=len, reverse=True)[:max_phrases]


WINDOW_CHARS = 1000  # about the 256 tokens an embedding model reads of one text
MAX_WINDOWS = 4


def prose_windows(prompt: str, parts: PromptParts | None = None, size: int = WINDOW_CHARS,
                  max_windows: int = MAX_WINDOWS) -> list[str]:
    """A long prompt's prose in windows for the query embedding, instead of its head alone.

    A prompt of at most ``size`` characters is one window: itself, unchanged (a short
    prompt is embedded exactly as before). A longer one's prose (code and tracebacks left
    out: they go to the lexical and clue lists) is cut at paragraph ends into windows of
    about ``size`` characters; past ``max_windows`` the first, the last and evenly spaced
    ones between are kept. The prompt's first line (its title) opens every later window, so
    each says what the report is about. Returns at least one window for a non-blank prompt.
    """
    if len(prompt) <= size:
        return [prompt] if prompt.strip() else []
    parts = parts if parts is not None else analyze(prompt)
    prose = parts.prose or prompt
    title = prose.split("\n", 1)[0][:200]
    windows: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in prose.split("\n\n")):
        if not paragraph:
            continue
        while len(paragraph) > size:  # a wall of text: cut at a sentence end when there is one
            cut = paragraph.rfind(". ", 0, size)
            cut = cut + 1 if cut > size // 2 else size
            if current:
                windows.append(current)
                current = ""
            windows.append(paragraph[:cut])
            paragraph = paragraph[cut:].strip()
        if current and len(current) + len(paragraph) + 2 > size:
            windows.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        windows.append(current)
    if len(windows) > max_windows:
        step = (len(windows) - 1) / (max_windows - 1)
        windows = [windows[round(i * step)] for i in range(max_windows)]
    return [w if n == 0 or w.startswith(title) else f"{title}\n{w}" for n, w in enumerate(windows)] or [prompt[:size]]


def describe_frame(frame: Frame) -> str:
    """``traceback frame 3 (wcs.py:1269 in _array_converter)``: how ``--explain`` names a frame."""
    where = frame.path.rsplit("/", 1)[-1] + (f":{frame.line}" if frame.line else "")
    return f"traceback frame {frame.number} ({where}{' in ' + frame.function if frame.function else ''})"



# Issue templates: a heading line (markdown ``### Describe the bug`` or a bold line
# ``**To Reproduce**``), and the sections whose heading says they hold the reporter's
# environment; their words (bug, reproduce, expected, behavior, version, OS, Python …) are in
# every report and name no code.
_HEADING = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+([^\n]*?)[ \t#]*|\*\*([^*\n]{1,80})\*\*:?)[ \t]*$", re.M)
_ENV_HEADING = re.compile(r"\b(?:environment|versions?|system|platform|screenshots?|your project|installation)\b", re.I)
# "- OS: Mac", "- Python version: 3.8.2", "pylint 2.8.3", "astroid 2.5.6": a name and a version.
_ENV_LINE = re.compile(r"^[ \t]*(?:[-*][ \t]+)?(?:[\w .+-]{1,40}:[ \t]*[^\n]{0,80}|[\w.+-]{1,30}[ \t]+v?\d+\.\d+[\w.+-]*"
                       r"(?:[ \t][^\n]{0,80})?)$")


def strip_template(text: str) -> str:
    """``text`` without its issue-template scaffolding, for choosing search terms.

    Removed: heading lines (``### Bug description``, ``**Expected behavior**``) after the first
    line (the title stays), and under a heading naming the reporter's environment (versions,
    system, platform, screenshots, "your project", installation) every line up to the next
    heading; elsewhere, a bulleted ``- Key: value`` line whose key ends in ``version``/``OS``,
    a setup command (``git clone …``, ``cd docs``, ``pip install -e .``), screenshots'
    ``<img>`` tags, ``<!-- -->`` comments (a template's instructions) and the ``_No response_``
    an issue form writes for a field left empty. An environment
    section ends at its first line of prose or code. Headings inside fenced code are code."""
    if "\n" not in text:
        return text
    if "<!--" in text:
        text = _HTML_COMMENT.sub(" ", text)
    title, _, body = text.partition("\n")
    out = [title]
    dropping = fenced = False
    for line in body.split("\n"):
        if line.lstrip(" ").startswith(("```", "~~~")):
            fenced = not fenced
        heading = _HEADING.match(line) if not fenced and ("#" in line or "**" in line) else None
        if heading:
            words = heading.group(1) if heading.group(1) is not None else heading.group(2)
            dropping = bool(_ENV_HEADING.search(words))
            continue
        if dropping:
            # An environment section holds "key: value" and "name 1.2" lines; the first line of
            # prose or code in it (a report pasted twice, a snippet) ends it.
            if not line.strip() or _ENV_LINE.match(line) or len(line.split()) <= 3:
                continue
            dropping = False
        if ":" in line and _VERSION_KEY.match(line):
            continue
        if _SHELL_LINE.match(line):
            continue
        if "_No response_" in line and line.strip() == "_No response_":
            continue  # a GitHub issue form's placeholder for a field left empty
        if "<" in line and "<img" in line:
            line = _IMG_TAG.sub(" ", line)
        out.append(line)
    return "\n".join(out)


# A reproducer's setup commands name a checkout, a directory or an environment, never this
# code (``git clone URL``, ``cd docs``, ``pip install -e .``, ``python -m venv env``); other
# commands stay, since ``echo … > conf.py`` or ``pip install pkg==0.10`` may hold the clue.
_SHELL_LINE = re.compile(r"^[ \t]*(?:\$[ \t]+)?(?:git[ \t]+(?:clone|checkout|pull|fetch)|cd|mkdir|"
                         r"pip3?[ \t]+install[ \t]+(?:-[er]|\.|git\+)|python3?[ \t]+-m[ \t]+venv|source|"
                         r"conda[ \t]+(?:create|activate)|virtualenv)\b[^\n]*$")
# A screenshot (``<img width="148" alt=… src=…>``) and a template's instructions (``<!-- … -->``);
# other HTML stays: a report about HTML output quotes the tags the code writes.
_IMG_TAG = re.compile(r"<img\b[^<>]*>", re.I)
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)


_VERSION_KEY = re.compile(r"^[ \t]*[-*][ \t]+[\w .+-]{0,30}\b(?:version|OS|platform)[ \t]*:", re.I)
_NAMESPACED = re.compile(r"(?<![\w:/])([a-z][a-z0-9]{0,9}):([a-z][a-z0-9_]{2,40})(?![\w/]|:[a-z])")


def compound_names(parts: PromptParts, text: str) -> list[str]:
    """Code spellings of names a prompt writes in markup or option syntax, for identifier lookup:
    a namespaced name ``py:method`` (a role or directive of a documentation domain, ``c:func``)
    as ``PyMethod``; a hyphenated symbol ``ignore-paths`` as ``ignore_paths`` and ``IgnorePaths``.
    Only the spellings the index defines count (:func:`cogd.retrieve.clues.resolve`), so a
    guess that names nothing costs one lookup."""
    out: dict[str, None] = {}
    if ":" in text:
        for m in _NAMESPACED.finditer(text):
            out[m.group(1).capitalize() + "".join(w.capitalize() for w in m.group(2).split("_"))] = None
    for symbol in parts.symbols[:20]:
        words = symbol.lstrip("-").split("-")
        out["_".join(words)] = None
        out["".join(w.capitalize() for w in words)] = None
    return [name for name in out if name not in parts.identifiers][:40]
