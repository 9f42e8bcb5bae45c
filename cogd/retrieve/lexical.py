"""Lexical retrieval: a prompt in plain words → BM25-ranked entities via SQLite FTS5.

FTS5's ``bm25()`` is Okapi BM25 (k1 = 1.2, b = 0.75; Robertson & Zaragoza,
"The Probabilistic Relevance Framework: BM25 and Beyond", 2009) with per-column
weights; it returns lower-is-better values, which are negated here so that a
higher score is better everywhere in cogd.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import Counter
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


def stopword_names(text: str, max_names: int = 16) -> list[str]:
    """The whole words of ``text`` that :func:`query_terms` drops as stopwords, as written.

    A search box is not a prompt: ``cogd search hello`` asks for a definition named ``hello``,
    which prose analysis drops as filler. The caller looks these words up as exact names
    (``cogd.retrieve.clues.resolve``) so a definition that carries one is found, while the BM25
    terms (and every prompt's pack) stay as they are. Distinct, in order of first appearance,
    at most ``max_names``; only the first ``MAX_QUERY_CHARS`` characters are read.
    """
    seen: dict[str, None] = {}
    for token in _WORD.findall(text[:MAX_QUERY_CHARS]):
        if len(token) >= 2 and token.lower() in STOPWORDS:
            seen.setdefault(token, None)
            if len(seen) >= max_names:
                break
    return list(seen)


# Words of tracebacks, install paths and issue templates ("Describe the bug", "Environment info"):
# frequent in a pasted report, about no project's code. Dropped from long prompts only.
LOG_WORDS = frozenset(
    """traceback recent call last most line file module stdin usr lib lib64 local python python2 python3
    site dist packages site-packages dist-packages home users anaconda conda miniconda envs venv env bin
    py ipython input error exception raise raised
    describe reproduce expected behavior behaviour actual environment info version versions os platform
    screenshots screenshot additional context steps results output tools extensions extension windows linux
    macos ubuntu bug report""".split()
)
MAX_IDF_CANDIDATES = 120
SHORT_PROMPT_CHARS = 400  # up to this long and 48 terms, a prompt is searched by all its words, as it always was  # terms of a long prompt whose document frequency is looked up
_FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"  # the index's (cogd.index.store)


def document_frequencies(conn: sqlite3.Connection, terms: list[str]) -> tuple[dict[str, int], int]:
    """``({term: number of entities containing it}, number of entities)`` from the FTS index.

    Each term is tokenised by FTS5 itself (a temporary FTS5 table with the index's tokenizer,
    read back through ``fts5vocab``), so stemming matches the index exactly; a term that
    tokenises to several words (``parse_date``) counts its rarest word. Temporary tables
    live in the connection's ``temp`` schema, so a read-only connection works. Raises
    sqlite3.Error when the index is unreadable.
    """
    if not terms:
        return {}, 0
    # The temporary table is written (DML), and Python's sqlite3 opens a transaction before
    # DML: left open, it would pin this connection's read snapshot of the index for good (a
    # daemon's reader would keep answering from the index as it was at its first long prompt).
    # So the writes are committed or rolled back here, never left pending.
    opened = not conn.in_transaction
    try:
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.cogd_query USING fts5(t, tokenize = '{_FTS_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.cogd_query_words USING fts5vocab(temp, cogd_query, 'instance')")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.cogd_index_words USING fts5vocab(main, entities_fts, 'row')")
        conn.execute("DELETE FROM temp.cogd_query")
        conn.executemany("INSERT INTO temp.cogd_query(rowid, t) VALUES (?, ?)", list(enumerate(terms, 1)))
        words: dict[int, list[str]] = {}
        for word, row in conn.execute("SELECT term, doc FROM temp.cogd_query_words"):
            words.setdefault(row, []).append(word)
        conn.execute("DELETE FROM temp.cogd_query")
        if opened and conn.in_transaction:
            conn.commit()
    except BaseException:
        if opened and conn.in_transaction:
            conn.rollback()
        raise
    distinct = sorted({w for ws in words.values() for w in ws})
    df: dict[str, int] = {}
    for start in range(0, len(distinct), 500):
        chunk = distinct[start:start + 500]
        df.update(conn.execute(f"SELECT term, doc FROM temp.cogd_index_words WHERE term IN ({','.join('?' * len(chunk))})",
                               chunk).fetchall())
    total = conn.execute("SELECT count(*) FROM entities").fetchone()[0]
    return {term: min((df.get(w, 0) for w in words.get(n, [])), default=0) for n, term in enumerate(terms, 1)}, total


def weighted_terms(conn: sqlite3.Connection, text: str, boosts: dict[str, float] | None = None,
                   max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The search terms of a prompt, chosen by weight rather than by order of appearance.

    A prompt of at most ``SHORT_PROMPT_CHARS`` characters and ``max_terms`` distinct terms keeps
    them all, in order (exactly :func:`query_terms`: short prompts cost nothing more). A longer
    one (an issue template of 40 words included) keeps at most the
    ``max_terms`` terms with the highest ``boost × (1 + ln tf) × idf``: ``tf`` the term's count in
    the prompt, ``boost`` from ``boosts`` (e.g. 3 for a word of an identifier or a frame, 1 for
    prose; default 1), ``idf = ln(1 + (N − df + 0.5) / (df + 0.5))`` (the BM25 IDF of Robertson &
    Zaragoza 2009, over the index's ``N`` entities); a term no entity contains is dropped.
    Only the ``MAX_IDF_CANDIDATES`` best by ``boost × (1 + ln tf)`` are looked up. Returns the
    chosen terms, best first. Raises sqlite3.Error when the index is unreadable.
    """
    terms = query_terms(text, max_terms=1 << 30)
    if len(terms) <= max_terms and len(text) <= SHORT_PROMPT_CHARS:
        return terms
    if "://" in text or "www." in text:  # a link's words name another site, not this code
        text = _URL.sub(" ", text)
        terms = query_terms(text, max_terms=1 << 30)
    counts: Counter[str] = Counter()
    for token in _WORD.findall(text[:MAX_QUERY_CHARS]):
        counts[token.lower()] += 1
    boosts = boosts or {}

    def prior(term: str) -> float:
        return boosts.get(term, 1.0) * (1.0 + math.log(max(counts.get(term, 1), 1)))

    candidates = sorted((t for t in terms if t not in LOG_WORDS), key=prior, reverse=True)[:MAX_IDF_CANDIDATES]
    df, total = document_frequencies(conn, candidates)
    scored = []
    for term in candidates:
        n = df.get(term, 0)
        if n <= 0:
            continue
        idf = math.log(1.0 + (total - n + 0.5) / (n + 0.5))
        scored.append((prior(term) * idf, term))
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [term for _w, term in scored[:max_terms]]


MAX_PHRASES = 24
_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+")


def message_trigrams(phrases: list[str], max_phrases: int = MAX_PHRASES) -> list[str]:
    """Three-word windows of message phrases, each with a word that is not a stopword: a printed message matches its source's format string on any three words in a
    row that no variable part interrupts (``"duplicate term description of mysql"`` →
    ``duplicate term description``, ``term description of``, ``description of mysql``)."""
    out: dict[str, None] = {}
    for phrase in phrases:
        words = phrase.split()
        for i in range(len(words) - 2):
            window = words[i:i + 3]
            if any(w.lower() not in STOPWORDS for w in window):
                out.setdefault(" ".join(window).lower(), None)
                if len(out) >= max_phrases:
                    return list(out)
    return list(out)


def phrase_search(conn: sqlite3.Connection, phrases: list[str], *, limit: int = 50,
                  kinds: tuple[str, ...] | None = None) -> list[Hit]:
    """Entities containing any of ``phrases`` (each an FTS5 phrase: its words in a row), best
    BM25 first, at most ``limit``; [] for no phrase. Raises sqlite3.Error when the index is unreadable."""
    if not phrases:
        return []
    rows = store.search_fts(conn, match_expression(phrases), COLUMN_WEIGHTS, limit=limit, kinds=kinds)
    return [Hit(*row) for row in rows]


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
    conn: sqlite3.Connection, text: str, *, limit: int = 50, kinds: tuple[str, ...] | None = None,
    terms: list[str] | None = None,
) -> list[Hit]:
    """Entities matching ``text`` best first, at most ``limit``.

    ``kinds`` restricts entity kinds inside the query, before the limit cut,
    so a filter never empties the result. ``terms``: the terms to search
    (e.g. :func:`weighted_terms`); default :func:`query_terms` of ``text``.
    Returns [] when there is no searchable term. Raises sqlite3.Error when
    the index is unreadable.
    """
    terms = query_terms(text) if terms is None else terms
    if not terms:
        return []
    rows = store.search_fts(conn, match_expression(terms), COLUMN_WEIGHTS, limit=limit, kinds=kinds)
    return [Hit(*row) for row in rows]
