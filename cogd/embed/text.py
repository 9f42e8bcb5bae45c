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


def entity_text(kind: str, qualname: str, signature: str, doc: str, body: str, path: str,
                max_chars: int = MAX_TEXT_CHARS) -> str:
    """The text embedded for one code entity, at most ``max_chars`` characters.

    Lines: ``"<kind> <qualname> (<name words>) in <path>"``, the signature,
    the docstring (at most 480 characters), then as much of the body as fits.
    The signature and the docstring are taken out of the body's head when
    they appear there (Python bodies start with both), so they are not paid
    for twice. Any argument may be empty.
    """
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
