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
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)[^\n]*\n(.*?)(?:^ {0,3}\1[ \t]*$|\Z)", re.M | re.S)
_ERROR_LINE = re.compile(
    r"^\s*(?:Exception in thread \"[^\"\n]*\" |Caused by: |Uncaught |panic: )?((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Warning|Fault|Failure|Exit|Interrupt))"
    r"(?::[ \t]*([^\n]{0,300}))?$", re.M)
_URL = re.compile(r"\b(?:https?|ftp)://[^\s<>()\[\]\"']+|\bwww\.[^\s<>()\[\]\"']+")
# A logged warning or error: "WARNING: msg", "ERROR: msg", "path.ext:12: WARNING: msg", "x.rst:3:msg".
_LEVEL = r"(?:WARNING|ERROR|CRITICAL|SEVERE|FATAL|warning|error)(?:\s*\(\w+\))?:\s*"
_LOGGED = re.compile(r"^\s*(?:\S+:\d+:\s*(?:" + _LEVEL + r")?|" + _LEVEL + r")([A-Za-z][^\n]{8,300})$", re.M)
# Lines of a traceback outside a code block: its header, frame lines and the source line under each.
_TRACE_LINE = re.compile(r'^(?:Traceback \(most recent call last\):?|\s*File "[^\n]*|\s+at \S[^\n]*|'
                         r'\S+\.py(?:x)?(?::\d+:| in )[^\n]*|-*> ?\d+[^\n]*)\n?', re.M)
_LITERAL = re.compile(r"\"([^\"\n]{3,200})\"|'([^'\n]{3,200})'")
_BACKTICK = re.compile(r"(?<!`)`{1,2}([^`\n]{2,120})`{1,2}(?!`)")
_CAMEL = re.compile(r"^_*[A-Za-z][a-z0-9]*[A-Z]\w*$|^_*[A-Z]{2,}[a-z]\w*$")
_SNAKE = re.compile(r"^_*[A-Za-z][A-Za-z0-9]*_\w*[A-Za-z0-9]$|^__\w+__$")
_TEST_WORD = re.compile(r"(^|[/._])tests?([/._]|$)|^test_|_test$|^Test[A-Z]|conftest", re.I)

# Words that look like identifiers in prose but name nothing in a code base.
_NOT_IDENTIFIERS = frozenset("e.g i.e etc.pp vs.".split())


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
    for m in (_PY_FRAME.finditer(text) if 'File "' in text else ()):
        found.append((m.start(), m.group(1), int(m.group(2)), m.group(3) or "", "python"))
    for m in (_IPY_FRAME.finditer(text) if ".py in " in text or ".pyx in " in text else ()):
        # IPython marks the frame's current line with an arrow a few lines below its header.
        arrow = _IPY_ARROW.search(text, m.end(), m.end() + 2000)
        nxt = _IPY_FRAME.search(text, m.end())
        line = int(arrow.group(1)) if arrow and (nxt is None or arrow.start() < nxt.start()) else 0
        found.append((m.start(), m.group(1), line, m.group(2), "ipython"))
    for m in (_PYTEST_FRAME.finditer(text) if ".py:" in text or ".pyx:" in text else ()):
        found.append((m.start(), m.group(1), int(m.group(2)), m.group(3) or "", "pytest"))
    stack = " at " in text or "\tat " in text
    for m in (_JS_FRAME.finditer(text) if stack else ()):
        found.append((m.start(), m.group(2), int(m.group(3)), (m.group(1) or "").strip(), "js"))
    for m in (_JAVA_FRAME.finditer(text) if stack and (".java:" in text or ".kt:" in text) else ()):
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
    return bool(_CAMEL.match(word) or _SNAKE.match(word))


def _blocks(text: str) -> tuple[list[str], str]:
    """``(code blocks, prose)``: fenced blocks, then indented ones (four spaces or a tab after
    a blank line) in what is left; the rest is prose."""
    code: list[str] = []
    spans = [text]
    if "```" in text or "~~~" in text:
        spans = []
        last = 0
        for m in _FENCE.finditer(text):
            spans.append(text[last:m.start()])
            code.append(m.group(2))
            last = m.end()
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
        elif call or _looks_like_code_name(token):
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
        for m in _ERROR_LINE.finditer(text):
            message = (m.group(2) or "").strip()
            errors.append(f"{m.group(1)}: {message}" if message else m.group(1))
        parts.errors = _distinct(errors)
    messages = [e.split(": ", 1)[1] for e in parts.errors if ": " in e]
    if ":" in text:
        for m in _LOGGED.finditer(text):
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
        parts.literals = _distinct(m.group(1) or m.group(2) for m in _LITERAL.finditer(text))


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
        text = _URL.sub(" ", text)
    parts.frames = _frames(text)
    parts.code, prose = _blocks(text)
    if parts.frames:
        prose = _TRACE_LINE.sub("", prose)
    if "Error" in prose or "Exception" in prose or "Warning" in prose:
        prose = _ERROR_LINE.sub("", prose)
    parts.prose = prose.strip()

    ticked = [m.group(1) for m in _BACKTICK.finditer(text)] if "`" in text else []
    _names(text, parts, ticked)
    _printed(text, prose, parts, ticked)
    return parts


_KEBAB = re.compile(r"-{0,2}([a-z][a-z0-9]+(?:-[a-z][a-z0-9]*)+)")


def _kebab_words(text: str) -> list[str]:
    """Hyphenated lower-case names among the whitespace-separated words of ``text`` (quotes,
    brackets and punctuation around them stripped; ``--`` of an option dropped). A split and a
    match per hyphenated word: a scanning pattern costs five times more on a 10 KB report."""
    out = []
    for word in text.split():
        if "-" in word:
            match = _KEBAB.fullmatch(word.strip("`'\"()[]{},.;:!?"))
            if match:
                out.append(match.group(1))
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

