"""What gets embedded for a code entity, and the cache key of that text.

The text leads with what a searcher would say: the kind, the qualified name
(also split into lower-case words, since ``HTTPConnection._send_output`` is one
token soup to WordPiece), the file, the signature, the docstring; then the
head of the body. Whitespace is collapsed: it costs the tokenizer nothing but
would eat the character budget. The whole text is capped at ``max_chars``
characters (default 1,200) so that tokenising it stays cheap: on 3,581
standard-library functions the texts averaged 2.9 characters per WordPiece
token (136 tokens mean, 380 at p95, 794 at most), and 14% of them exceed a
256-token cap, which cuts the tail of their body.
"""

from __future__ import annotations

import re

import xxhash

MAX_TEXT_CHARS = 1200
MAX_SIGNATURE_CHARS = 240
MAX_DOC_CHARS = 480

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_EMPTY_STRING = re.compile(r"""[rRbBuUfF]{0,2}(\"\"\"|''')\s*\1""")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: ``full``: header, signature, docstring, head of the body (the text cogd always embedded).
#: ``words``: header, signature, a shorter docstring, then the body's identifiers as distinct
#: lower-case words instead of its code (the vocabulary of the body in fewer tokens).
TEXT_STYLES = ("full", "words")
WORDS_DOC_CHARS = 240
WORDS_MAX_CHARS = 600
# Words every body has: they carry no meaning for a search, only cost tokens.
_COMMON = frozenset(
    "self cls return if else elif for while in is not and or none true false def class import from as with "
    "try except finally raise pass break continue lambda yield await async global nonlocal del assert "
    "let const var function new this null undefined void int str bool float len list dict set tuple "
    "args kwargs i j k n x y e err".split())


def _squash(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def name_words(qualname: str) -> str:
    """``"HTTPConnection._send_output"`` → ``"http connection send output"``."""
    return " ".join(w.lower() for w in _WORD.findall(qualname))


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a space when one is near."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ", int(limit * 0.8))
    return head[:space] if space > 0 else head


def body_words(body: str, skip: set[str] | None = None) -> str:
    """The identifiers of ``body`` as distinct lower-case words, in order of first use.

    ``"fh = open_file(path); fh.read_all()"`` → ``"fh open file path read all"``.
    Language keywords and a few names every body has (``self``, ``return``, ``i``)
    are left out, and so are the words in ``skip``.
    """
    seen = set(skip or ())
    seen.update(_COMMON)
    out = []
    for ident in _IDENT.findall(body):
        for word in _WORD.findall(ident):
            word = word.lower()
            if len(word) > 1 and word not in seen:
                seen.add(word)
                out.append(word)
    return " ".join(out)


def entity_text(kind: str, qualname: str, signature: str, doc: str, body: str, path: str,
                max_chars: int = MAX_TEXT_CHARS, style: str = "full") -> str:
    """The text embedded for one code entity, at most ``max_chars`` characters.

    ``style`` ``"full"`` (default): lines ``"<kind> <qualname> (<name words>) in <path>"``,
    the signature, the docstring (at most 480 characters), then as much of
    the body as fits. The signature and the docstring are taken out of the
    body's head when they appear there (Python bodies start with both), so
    they are not paid for twice. ``"words"``: the same header and signature,
    the docstring cut at 240 characters, then :func:`body_words` of the rest
    of the body; at most ``min(max_chars, 600)`` characters. Any text
    argument may be empty; raises ValueError for an unknown ``style``.
    """
    if style not in TEXT_STYLES:
        raise ValueError(f"text style must be one of {', '.join(TEXT_STYLES)}, got {style!r}")
    words = name_words(qualname)
    header = f"{kind} {qualname}".strip()
    if words and words != qualname.lower():
        header += f" ({words})"
    if path and path != qualname:
        header += f" in {path}"
    sig = _cut(_squash(signature), MAX_SIGNATURE_CHARS)
    doc_text = _squash(doc)
    rest = _squash(body)
    if sig:
        at = rest.find(sig[:80])
        if 0 <= at < 200:  # decorators may come first
            rest = (rest[:at] + rest[at + len(sig):]).strip()
    if doc_text:
        at = rest.find(doc_text[:80])
        if 0 <= at < 400:
            end = at + len(doc_text) if rest.startswith(doc_text, at) else at + 80
            rest = _EMPTY_STRING.sub("", rest[:at] + rest[end:], count=1).strip()
    if style == "words":
        max_chars = min(max_chars, WORDS_MAX_CHARS)
        short_doc = _cut(doc_text, WORDS_DOC_CHARS)
        head = "\n".join(p for p in (header, sig, short_doc) if p)
        known = {w.lower() for w in _WORD.findall(head)}
        words = body_words(rest, known)
        room = max_chars - len(head) - 1
        if words and room > 20:
            head += "\n" + _cut(words, room)
        return head[:max_chars]
    parts = [header, sig, _cut(doc_text, MAX_DOC_CHARS)]
    head = "\n".join(p for p in parts if p)
    room = max_chars - len(head) - 1
    if rest and room > 40:
        head += "\n" + _cut(rest, room)
    return head[:max_chars]


def text_key(model_id: str, max_tokens: int, text: str) -> str:
    """Cache key of one embedding: 32 hex digits of xxh3-128 over (model id, cap, text).

    Equal inputs give equal keys on every machine and run, so an unchanged
    entity is embedded once per model and cap. Lone surrogates in ``text``
    are hashed as their escaped bytes rather than raising.
    """
    data = f"{model_id}\x00{max_tokens}\x00{text}".encode("utf-8", "surrogatepass")
    return xxhash.xxh3_128_hexdigest(data)
