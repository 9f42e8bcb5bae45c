"""Lexical retrieval: a prompt in plain words → BM25-ranked entities via SQLite FTS5.

FTS5's ``bm25()`` is Okapi BM25 (k1 = 1.2, b = 0.75; Robertson & Zaragoza,
"The Probabilistic Relevance Framework: BM25 and Beyond", 2009) with per-column
weights; it returns lower-is-better values, which are negated here so that a
higher score is better everywhere in cogd.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from cogd.index import store

# Column weights for bm25(entities_fts, path, name, signature, doc, body):
# a match in a name says far more than one somewhere in a body.
COLUMN_WEIGHTS = (2.0, 8.0, 3.0, 2.0, 1.0)
MAX_QUERY_TERMS = 48
MAX_QUERY_CHARS = 20_000  # a 1 MB prompt is searched by its head

# Common English words and prompt filler that carry no signal about code.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each even ever
    few for from further get gets got had has have having he her here hers him his how i if in
    into is it its itself just let lets like make makes me might more most much must my need
    needs no nor not now of off on once only or other our out over own please same see seems
    she should so some such than that the their them then there these they this those through
    to too under until up us use used using very via want was way we were what when where which
    while who whom why will with would you your yours fix fixed fixes issue bug problem add
    adds added change changes changed instead something thing things currently still
    ok okay yes yeah yep sure thanks thank great good nice cool go ahead continue proceed next
    done right alright hi hello hey""".split()
)

_WORD = re.compile(r"[^\W\d][\w]*", re.UNICODE)
_CAMEL_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")


def query_terms(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """Distinct search terms of a prompt, in order of first appearance.

    Identifiers are kept whole and also split (``parse_date`` → ``parse_date``,
    ``parse``, ``date``; ``EmailMessage`` → ``emailmessage``, ``email``,
    ``message``). Stopwords and one-letter words are dropped. Only the first
    ``MAX_QUERY_CHARS`` characters are read; at most ``max_terms`` are returned.
    """
    seen: dict[str, None] = {}
    for token in _WORD.findall(text[:MAX_QUERY_CHARS]):
        parts = [token] + [p for p in re.split(r"_+", token) if p]
        for part in list(parts):
            parts.extend(_CAMEL_PARTS.findall(part))
        for part in parts:
            word = part.lower()
            if len(word) < 2 or word in STOPWORDS:
                continue
            seen.setdefault(word, None)
            if len(seen) >= max_terms:
                return list(seen)
    return list(seen)


def match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH string ORing every term, each quoted as an FTS5 string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


@dataclass
class Hit:
    """One retrieved entity with its BM25 score (higher is better).

    The fields before ``score`` are :data:`cogd.index.store.SUMMARY_COLUMNS`, in that order.
    """

    id: str
    kind: str
    subkind: str
    path: str
    name: str
    qualname: str
    start_line: int
    end_line: int
    signature: str
    doc: str
    parent_id: str | None
    score: float
    signals: dict = field(default_factory=dict)  # each ranking signal's contribution, for --explain


def bm25_search(
    conn: sqlite3.Connection, text: str, *, limit: int = 50, kinds: tuple[str, ...] | None = None
) -> list[Hit]:
    """Entities matching ``text`` best first, at most ``limit``.

    ``kinds`` restricts entity kinds inside the query, before the limit cut,
    so a filter never empties the result. Returns [] when ``text`` has no
    searchable term. Raises sqlite3.Error when the index is unreadable.
    """
    terms = query_terms(text)
    if not terms:
        return []
    rows = store.search_fts(conn, match_expression(terms), COLUMN_WEIGHTS, limit=limit, kinds=kinds)
    return [Hit(*row) for row in rows]
