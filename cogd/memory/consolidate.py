"""Consolidation: merge duplicates, promote candidates on evidence, decay dead weight, prune old records.

Runs inside the daemon at session end and once per idle stretch (see
:mod:`cogd.daemon.memory_methods`), and on demand (``cogd consolidate``,
``memory.consolidate``). Pure logic over a :class:`~cogd.memory.api.MemoryStore`
plus read-only access to the usage ledger in ``.cogd/state.db``
(:class:`cogd.usage.ledger.LedgerReader`); it knows
nothing of the daemon. Every step is idempotent (a second run finds nothing to
do), every mutation asks :func:`cogd.memory.lattice.transition` first, writes
the record file atomically and appends an event by actor ``consolidation``
whose ``detail`` names the ``step`` and its evidence.

Steps, in order (:data:`STEPS`):

``dedup``
    Among the ``candidate`` and ``active`` memories of one type, a pair is a
    confirmed duplicate when (a) their normalised content is equal, or (b) a
    *signal* fires — titles (or bodies) within rapidfuzz ratio 92 of each other
    (:func:`cogd.memory.dedup.title_score`), or embedding cosine ≥
    ``[consolidate] similarity`` together with a token_set_ratio of the
    normalised texts ≥ ``token_agreement`` — **and** no sign of a contradiction
    (:func:`contradiction`): a claim and its negation embed alike (MiniLM:
    0.93–0.99, while paraphrases score 0.74–0.94), so a pair whose negations
    differ in parity, whose qualifiers (only, always …) differ, or whose
    content words differ by a swap of one or two words on each side
    ("naive" ↔ "aware", "dump" ↔ "dumps", "8000" ↔ "9500") is *kept apart*
    and reported, never merged.
    The **survivor** of a group is the active one, then the more used (ledger
    hits, then deliveries), then the older, then the smaller id; every other
    member becomes ``superseded`` with ``superseded_by`` = the survivor (for a
    candidate this is the lattice's merge-only move). The survivor keeps the
    union of anchors and tags, ``supersedes`` names the last merged record, and
    its ``evidence`` frontmatter list gains one entry per merged record
    (``id``, ``session_id``, ``source``, ``how``, ``score``, ``merged_at``).
``promote``
    A ``candidate`` becomes ``active`` on any of: hits in ≥
    ``promote_hit_sessions`` distinct sessions (the ledger's delivery items of
    the memory and of everything merged into it); corroboration by ≥
    ``promote_corroborations`` independent observations (records merged into it
    that came from *another* session — the same session saying a thing twice is
    not evidence); or a ``verify`` by a person (an event ``verify`` by actor
    ``human``; an agent's verify does not count). The evidence is the event's detail.
``decay``
    An ``active`` memory delivered ≥ ``decay_min_misses`` times without a hit
    since it was last hit or (re)activated, and not hit for
    ``decay_horizon_days``, goes ``stale`` (ranking already lowers it through
    its misses). Listed in the report's ``stale``; ``cogd verify`` brings it back.
``retention``
    ``rejected`` and ``superseded`` records that have been so for longer than
    ``retention_days`` (since the event that moved them there) become ``pruned``:
    the body is removed, the tombstone is
    kept (a superseded record whose exact content lives on in a live memory
    gets none — that claim is not rejected), and the text in its events is
    replaced by hashes, as erasure does (:meth:`MemoryLedger.redact`).

Entry points: :func:`consolidate` (returns a :class:`Report`) and
:func:`resolve_survivor` (follow ``superseded_by`` to the live record).
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rapidfuzz import fuzz, process

from cogd.memory import lattice
from cogd.memory.api import FileChange
from cogd.memory.dedup import TITLE_RATIO, title_score
from cogd.memory.errors import MemoryRefused, bad_request
from cogd.memory.events import event_op, pre_image, tombstone_op
from cogd.memory.normalise import content_hash, normalise
from cogd.memory.record import Anchor, iso
from cogd.secrets import strip_private
from cogd.usage.ledger import LedgerReader

if TYPE_CHECKING:
    from cogd.memory.api import MemoryStore

log = logging.getLogger("cogd.consolidate")

STEPS = ("dedup", "promote", "decay", "retention")
ACTOR = "consolidation"
DAY_S = 86400.0
CHAIN_MAX = 64  # superseded_by hops followed at most (a cycle written by hand ends there)
COMPARE_CHARS = 4000  # text compared by the fuzzy tests, per memory

# Words that flip a claim. Counted on normalised words (apostrophes are dropped: "don't" → "dont").
NEGATORS = frozenset({
    "not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without", "cannot", "cant",
    "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "wont", "wouldnt", "shouldnt", "couldnt",
    "hasnt", "havent", "hadnt", "mustnt", "neednt", "lack", "lacks", "lacking", "missing", "unless",
})
# Words that change a claim's scope: two texts must use the same set of them.
QUALIFIERS = frozenset({"only", "always", "sometimes", "every", "all", "usually", "rarely"})
STOPWORDS = frozenset("""
a an the of to in on at for by with and or is are was were be been being it its this that these those as from
into onto when whenever if then than so do does did has have had will would can could should may might must
there their they them he she we you i your our which who whom what while after before about over under also just
very too here such per via up out any anything something one
""".split())
SWAP_MAX = 2  # content words differing on each side at most for a pair to count as "one word swapped"


def _stem(word: str) -> str:
    """A light suffix strip so inflections compare equal (``returns``/``returned``/``return``)."""
    if len(word) > 4:
        if word.endswith("ies"):
            word = word[:-3] + "y"
        elif word.endswith("ing") and len(word) > 5:
            word = word[:-3]
        elif word.endswith("ed"):
            word = word[:-2]
        elif word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
            word = word[:-2]
        elif word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


_TOKEN = re.compile(r"\w[\w.'’]*")


def _words(text: str) -> list[str]:
    """Case-folded words; code names (with ``_``, ``.`` or digits: ``json.dumps``, ``sort_keys``, ``8000``)
    stay whole, apostrophes go (``don't`` → ``dont``)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    out = []
    for token in _TOKEN.findall(folded):
        token = token.rstrip(".'’").replace("'", "").replace("’", "")
        if token:
            out.append(token)
    return out


def _is_code(word: str) -> bool:
    return "_" in word or "." in word or any(c.isdigit() for c in word)


def contradiction(a: str, b: str) -> str | None:
    """Why two similar texts may state *different* claims, or None when nothing suggests it.

    ``a``, ``b``: claim texts (any case or punctuation). Signs, in order: the
    counts of negating words differ in parity; the sets of qualifiers differ;
    the content words (stop words out, light stemming, code names compared
    whole) differ by a swap of at most :data:`SWAP_MAX` words on *each* side.
    A paraphrase rewords more than that; a correction usually changes just that.
    """
    wa, wb = _words(a), _words(b)
    na, nb = sum(w in NEGATORS for w in wa), sum(w in NEGATORS for w in wb)
    if na % 2 != nb % 2:
        return "negation: one states it negated, the other does not"
    qa, qb = set(wa) & QUALIFIERS, set(wb) & QUALIFIERS
    if qa != qb:
        return f"qualifier: {', '.join(sorted(qa)) or '-'} vs {', '.join(sorted(qb)) or '-'}"
    skip = STOPWORDS | NEGATORS | QUALIFIERS
    sa = {(w if _is_code(w) else _stem(w)): w for w in reversed(wa) if w not in skip}  # stem -> first word
    sb = {(w if _is_code(w) else _stem(w)): w for w in reversed(wb) if w not in skip}
    da, db = sa.keys() - sb.keys(), sb.keys() - sa.keys()
    if da and db and len(da) <= SWAP_MAX and len(db) <= SWAP_MAX:
        return f"swap: {' '.join(sorted(sa[k] for k in da))} vs {' '.join(sorted(sb[k] for k in db))}"
    return None


# ---- report -------------------------------------------------------------------------------
@dataclass
class Action:
    """One change consolidation made (or, in a dry run, would make)."""

    step: str  # dedup | promote | decay | retention
    id: str
    type: str
    title: str
    old_status: str
    new_status: str
    detail: dict = field(default_factory=dict)
    applied: bool = False

    def as_dict(self) -> dict:
        return {"step": self.step, "id": self.id, "type": self.type, "title": self.title, "from": self.old_status,
                "to": self.new_status, "detail": self.detail, "applied": self.applied}


@dataclass
class Report:
    """What one run did. ``kept_apart``: similar pairs not merged, with the reason."""

    dry_run: bool
    trigger: str
    at: float
    actions: list[Action] = field(default_factory=list)
    kept_apart: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        counts = {step: sum(1 for a in self.actions if a.step == step) for step in STEPS}
        return {
            "dry_run": self.dry_run, "trigger": self.trigger, "at": self.at, "duration_s": round(self.duration_s, 3),
            "counts": counts, "actions": [a.as_dict() for a in self.actions], "kept_apart": self.kept_apart,
            "stale": [a.id for a in self.actions if a.step == "decay"], "errors": self.errors,
        }


# ---- helpers over the store ---------------------------------------------------------------------
@dataclass
class _Item:
    id: str
    type: str
    status: str
    title: str
    body: str
    content_hash: str
    session_id: str
    created_at: float
    deliveries: int = 0
    hits: int = 0
    vector: np.ndarray | None = None

    @property
    def text(self) -> str:
        return (self.body or self.title)[:COMPARE_CHARS]


def resolve_survivor(store: "MemoryStore", entity_id: str) -> dict:
    """Follow ``superseded_by`` from ``entity_id`` to the record that holds the claim now.

    Returns ``{"id": final id, "status": its status, "chain": [ids followed, first to last]}``;
    ``id`` is ``entity_id`` itself when it is not superseded. Stops at a missing
    record, a cycle or :data:`CHAIN_MAX` hops. Raises MemoryRefused ``not_found``
    when ``entity_id`` is unknown.
    """
    from cogd.memory.errors import not_found

    row = store.projection.row(entity_id)
    if row is None:
        raise not_found(entity_id)
    chain = [entity_id]
    while row["status"] in ("superseded", "pruned") and row["superseded_by"] and len(chain) <= CHAIN_MAX:
        nxt = store.projection.row(row["superseded_by"])
        if nxt is None or nxt["id"] in chain:
            break
        chain.append(nxt["id"])
        row = nxt
    return {"id": row["id"], "status": row["status"], "chain": chain}


def _vector_model(store: "MemoryStore") -> str | None:
    """The model whose vectors dedup compares: the encoder's when loaded, else the most common stored one."""
    model = store.encoder_model() if store.embed is not None else None
    if model is not None:
        return model
    return store.projection.commonest_vector_model()


def _fill_vectors(store: "MemoryStore", rounds: int = 16) -> None:
    """Embed live memories that have no vector yet (bounded), so paraphrases can be compared."""
    if store.embed is None:
        return
    for _ in range(rounds):
        if store.fill_vectors(64) == 0:
            return


def _detail_error(step: str, entity_id: str, exc: Exception) -> dict:
    kind = exc.kind if isinstance(exc, MemoryRefused) else exc.__class__.__name__
    return {"step": step, "id": entity_id, "kind": kind, "message": str(exc)}


# ---- the steps --------------------------------------------------------------------------------------
def _plan_dedup(store: "MemoryStore", ledger: LedgerReader, config, report: Report) -> list[tuple[_Item, _Item, dict]]:
    """``[(survivor, loser, match)]`` for every confirmed duplicate among live candidate/active memories."""
    problems = {p["path"] for p in store.projection.problems()}
    rows = [r for r in store.projection.rows(status=("candidate", "active")) if r["path"] not in problems]
    model = _vector_model(store)
    vectors = store.projection.vectors([r["id"] for r in rows], model) if model else {}
    usage = ledger.usage([r["id"] for r in rows])
    by_type: dict[str, list[_Item]] = {}
    for r in rows:
        n, hits, _ = usage.get(r["id"], (0, 0, None))
        by_type.setdefault(r["type"], []).append(_Item(
            r["id"], r["type"], r["status"], r["title"], r["body"], r["content_hash"], r["session_id"],
            r["created_at"], n, hits, vectors.get(r["id"])))
    plan: list[tuple[_Item, _Item, dict]] = []
    for items in by_type.values():
        # The survivor rule: active first, then more hits, more deliveries, older, smaller id.
        items.sort(key=lambda m: (m.status != "active", -m.hits, -m.deliveries, m.created_at, m.id))
        pairs = _similar_pairs(items, config)
        merged: set[int] = set()
        for i, j in sorted(pairs):
            if i in merged or j in merged:
                continue
            match = _judge(items[i], items[j], config)
            if match is None:
                continue
            if "kept_apart" in match:
                report.kept_apart.append({"ids": [items[i].id, items[j].id], "reason": match["kept_apart"],
                                          "how": match["how"], "score": match["score"]})
                continue
            merged.add(j)
            plan.append((items[i], items[j], match))
    return plan


def _similar_pairs(items: list[_Item], config) -> set[tuple[int, int]]:
    """Index pairs ``(i, j)``, i < j, that any duplicate signal links (a cheap, vectorised pre-filter)."""
    pairs: set[tuple[int, int]] = set()
    n = len(items)
    if n < 2:
        return pairs
    first: dict[str, int] = {}
    for j, m in enumerate(items):
        if m.content_hash in first:
            pairs.add((first[m.content_hash], j))
        else:
            first[m.content_hash] = j
    cutoff = TITLE_RATIO
    for texts in ([normalise(m.title) for m in items], [normalise(m.text) for m in items]):
        scores = process.cdist(texts, texts, scorer=fuzz.ratio, score_cutoff=cutoff, workers=1)
        for i, j in zip(*np.nonzero(scores)):
            if i < j:
                pairs.add((int(i), int(j)))
    with_vectors = [k for k, m in enumerate(items) if m.vector is not None]
    if len(with_vectors) > 1:
        dims = {items[k].vector.shape for k in with_vectors}
        if len(dims) == 1:
            matrix = np.stack([items[k].vector for k in with_vectors])
            sims = matrix @ matrix.T
            for a, b in zip(*np.nonzero(sims >= config.similarity)):
                if a < b:
                    pairs.add((with_vectors[int(a)], with_vectors[int(b)]))
    return pairs


def _judge(a: _Item, b: _Item, config) -> dict | None:
    """``{"how", "score"}`` when ``a`` and ``b`` are one claim; ``{"kept_apart": reason, …}`` when a signal
    fires but the texts look contradictory; None when they are different claims."""
    if a.content_hash == b.content_hash:
        return {"how": "exact", "score": 1.0}
    how, score = "", 0.0
    title = title_score(a.title, b.title)
    body = title_score(a.text, b.text)
    if title * 100 >= TITLE_RATIO:
        how, score = "title", title
    elif body * 100 >= TITLE_RATIO:
        how, score = "body", body
    elif a.vector is not None and b.vector is not None and a.vector.shape == b.vector.shape:
        cosine = float(np.dot(a.vector, b.vector))
        agreement = fuzz.token_set_ratio(normalise(a.text), normalise(b.text))
        if cosine >= config.similarity and agreement >= config.token_agreement:
            how, score = "embedding", cosine
    if not how:
        return None
    reason = contradiction(f"{a.title}\n{a.text}", f"{b.title}\n{b.text}")
    if reason:
        return {"kept_apart": reason, "how": how, "score": round(score, 4)}
    return {"how": how, "score": round(score, 4)}


def _merge(store: "MemoryStore", survivor_id: str, loser_id: str, match: dict, now: float) -> None:
    """Fold ``loser_id`` into ``survivor_id`` (both files, both events, the projection). Raises MemoryRefused."""
    with store.editing(survivor_id, loser_id) as [(survivor, srow), (loser, lrow)]:
        for row in (srow, lrow):
            if row["status"] not in ("candidate", "active"):
                raise bad_request(f"{row['id']} is {row['status']} now: not merged", id=row["id"])
        action = lattice.transition(lrow["status"], "superseded", entity_id=loser_id, merge=True)
        lattice.transition(srow["status"], srow["status"], entity_id=survivor_id)
        known = {a.entity for a in survivor.anchors}
        added = [a for a in loser.anchors if a.entity not in known]
        survivor.anchors = survivor.anchors + [Anchor(a.entity, a.hash) for a in added]
        survivor.tags = list(dict.fromkeys(survivor.tags + loser.tags))[:50]
        evidence = [e for e in survivor.extra.get("evidence") or [] if isinstance(e, dict)]
        seen = {e.get("id") for e in evidence}
        for entry in [e for e in loser.extra.get("evidence") or [] if isinstance(e, dict)] + [{
                "id": loser.id, "session_id": loser.session_id, "source": loser.source, "how": match["how"],
                "score": match["score"], "merged_at": iso(now)}]:
            if entry.get("id") not in seen:
                evidence.append(entry)
                seen.add(entry.get("id"))
        survivor.extra["evidence"] = evidence
        survivor.supersedes = loser.id
        survivor.updated_at = now
        loser.status, loser.superseded_by, loser.updated_at = "superseded", survivor.id, now
        # One commit for both files and both events: a crash half way is completed on restart,
        # never left as a candidate → superseded "hand edit" the lattice would refuse.
        store.commit("merge", ACTOR, [FileChange(loser), FileChange(survivor)], [
            event_op(ACTOR, loser_id, action, lrow["status"], "superseded", pre_image(lrow),
                     {"step": "dedup", "superseded_by": survivor_id, "how": match["how"],
                      "score": match["score"]}),
            event_op(ACTOR, survivor_id, "merge", srow["status"], srow["status"], None,
                     {"step": "dedup", "merged": loser_id, "how": match["how"], "score": match["score"],
                      "anchors_added": [a.entity for a in added]})])


def _merged_into(store: "MemoryStore") -> dict[str, list]:
    """``{survivor id: [rows superseded by it]}`` over the whole projection."""
    children: dict[str, list] = {}
    for row in store.projection.rows(status=("superseded", "pruned")):
        if row["superseded_by"]:
            children.setdefault(row["superseded_by"], []).append(row)
    return children


def _group(entity_id: str, children: dict[str, list]) -> list:
    """The rows merged into ``entity_id``, directly or through earlier merges (breadth first, cycle-safe)."""
    out, queue, seen = [], [entity_id], {entity_id}
    while queue:
        for row in children.get(queue.pop(0), []):
            if row["id"] not in seen:
                seen.add(row["id"])
                out.append(row)
                queue.append(row["id"])
    return out


def _plan_promote(store: "MemoryStore", ledger: LedgerReader, config) -> list[tuple[str, dict]]:
    """``[(candidate id, evidence)]`` for the candidates with enough evidence to become active."""
    problems = {p["path"] for p in store.projection.problems()}
    children = _merged_into(store)
    plan = []
    for row in store.projection.rows(status="candidate"):
        if row["path"] in problems:
            continue
        merged = _group(row["id"], children)
        evidence: dict = {}
        reasons = []
        if config.promote_hit_sessions:
            sessions = ledger.hit_sessions([row["id"]] + [r["id"] for r in merged])
            evidence["hit_sessions"] = sessions
            if len(sessions) >= config.promote_hit_sessions:
                reasons.append("hits")
        if config.promote_corroborations:
            others = {r["id"]: r["session_id"] for r in merged if r["session_id"] != row["session_id"]}
            try:
                record, _ = store.load(row["id"])
                for entry in record.extra.get("evidence") or []:
                    if isinstance(entry, dict) and entry.get("session_id", "") != row["session_id"]:
                        others.setdefault(str(entry.get("id")), str(entry.get("session_id", "")))
            except MemoryRefused:
                pass
            independent = sorted(set(others.values()))
            evidence["corroborated_by"] = [{"id": i, "session_id": s} for i, s in sorted(others.items())]
            if len(independent) >= config.promote_corroborations:
                reasons.append("corroboration")
        verifications = [e for e in store.ledger.events(row["id"]) if e["action"] == "verify" and e["actor"] == "human"]
        if verifications:
            evidence["verified_at"] = verifications[-1]["at"]
            reasons.append("verified")
        if reasons:
            plan.append((row["id"], {"because": reasons, **evidence}))
    return plan


def _activated_at(store: "MemoryStore", entity_id: str) -> float:
    """When the memory last became active (creation, activation, re-activation or a verify); 0 if never."""
    times = [e["at"] for e in store.ledger.events(entity_id)
             if e["new_status"] == "active" and (e["old_status"] != "active" or e["action"] == "verify")]
    return max(times, default=0.0)


def _plan_decay(store: "MemoryStore", ledger: LedgerReader, config, now: float) -> list[tuple[str, dict]]:
    """``[(active id, evidence)]`` for the active memories that decay to stale."""
    if not config.decay_min_misses:
        return []
    problems = {p["path"] for p in store.projection.problems()}
    children = _merged_into(store)
    rows = [r for r in store.projection.rows(status="active") if r["path"] not in problems]
    usage = ledger.usage([r["id"] for r in rows])
    plan = []
    for row in rows:
        if usage.get(row["id"], (0, 0, None))[0] < config.decay_min_misses:
            continue  # fewer deliveries than the threshold in all: cannot have enough misses
        ids = [row["id"]] + [r["id"] for r in _group(row["id"], children)]
        last_hit = ledger.outcomes_since(ids, 0.0)[2]
        since = max(row["created_at"], _activated_at(store, row["id"]), last_hit or 0.0)
        misses, hits, _ = ledger.outcomes_since(ids, since)
        if hits == 0 and misses >= config.decay_min_misses and now - since >= config.decay_horizon_days * DAY_S:
            plan.append((row["id"], {"misses_since": misses, "since": since, "last_hit_at": last_hit,
                                     "idle_days": round((now - since) / DAY_S, 1)}))
    return plan


def _plan_retention(store: "MemoryStore", config, now: float) -> list[tuple[str, dict]]:
    """``[(id, detail)]`` for rejected and superseded records that have been so for longer than the retention
    period — since the event that moved them there (a hand edit does not always bump the file's
    ``updated_at``); the file's ``updated_at`` when the ledger has no such event (a record that arrived so)."""
    if not config.retention_days:
        return []
    problems = {p["path"] for p in store.projection.problems()}
    cutoff = now - config.retention_days * DAY_S
    plan = []
    for row in store.projection.rows(status=("rejected", "superseded")):
        if row["path"] in problems or row["updated_at"] > now:
            continue
        moved = [e["at"] for e in store.ledger.events(row["id"])
                 if e["new_status"] == row["status"] and e["old_status"] != row["status"]
                 and e["action"] not in ("illegal_transition", "refused")]
        since = max(moved) if moved else row["updated_at"]
        if since <= cutoff:
            plan.append((row["id"], {"age_days": round((now - since) / DAY_S, 1)}))
    return plan


def _set_status(store: "MemoryStore", entity_id: str, to: str, detail: dict, now: float, action_name: str = "") -> None:
    """One status move through the lattice: file, event (actor consolidation), projection. Raises MemoryRefused."""
    with store.editing(entity_id) as [(record, row)]:
        old = row["status"]
        action = lattice.transition(old, to, entity_id=entity_id)
        if old == to:
            raise bad_request(f"{entity_id} is already {to}", id=entity_id)
        record.status = to
        record.updated_at = now
        store.commit(str(detail.get("step") or "consolidate"), ACTOR, [FileChange(record)],
                     [event_op(ACTOR, entity_id, action_name or action, old, to, pre_image(row), detail)])


def _prune(store: "MemoryStore", entity_id: str, detail: dict, now: float) -> dict:
    """Retention: body removed, tombstone kept, the events' text redacted. Returns the detail logged."""
    with store.editing(entity_id) as [(record, row)]:
        old = row["status"]
        action = lattice.transition(old, "pruned", entity_id=entity_id)
        body = strip_private(record.body).strip()
        stone = record.tombstone
        if not stone and body:
            chash = content_hash(body)
            live = any(r["content_hash"] == chash and r["id"] != entity_id
                       for r in store.projection.rows(status=tuple(lattice.LIVE)))
            stone = "" if old == "superseded" and live else chash
        ops = []
        if stone:
            reason = record.rejected_reason or (f"superseded by {record.superseded_by}" if old == "superseded" else "")
            ops.append(tombstone_op(stone, entity_id, reason or f"{old}; pruned by consolidation", now))
        record.tombstone = stone
        record.body = ""
        record.status = "pruned"
        record.updated_at = now
        # the count is what the redaction below finds: nothing else writes while the lock is held
        logged = {**detail, "step": "retention", "tombstone": bool(stone),
                  "events_redacted": store.ledger.unredacted(entity_id)}
        ops += [["redact", entity_id], event_op(ACTOR, entity_id, action, old, "pruned", None, logged)]
        store.commit("retention", ACTOR, [FileChange(record)], ops)
        return logged


def _erase_leftovers(store: "MemoryStore") -> None:
    """After pruning: merge FTS segments and checkpoint both WALs so removed text leaves the files."""
    store.projection.merge_text()
    store.ledger.checkpoint()


# ---- the entry point ------------------------------------------------------------------------------------
def consolidate(store: "MemoryStore", state_db: Path, config, *, dry_run: bool = False, trigger: str = "manual",
                now: float | None = None, steps: tuple[str, ...] = STEPS) -> Report:
    """Run the consolidation steps over ``store``; returns a :class:`Report`.

    ``state_db``: the ledger database (read-only here: deliveries, items, utility).
    ``config``: a :class:`cogd.config.ConsolidateConfig`. ``dry_run``: plan every
    step against the current state and change nothing (so a dry run cannot show
    a promotion that a merge of the same run would cause). ``trigger``: a label
    for the report (``session_end``, ``idle``, ``manual``). ``now``: unix seconds
    (default: the store's clock). ``steps``: a subset of :data:`STEPS`, run in
    their canonical order.

    A record that cannot be changed (a file with a pending problem, a status
    that moved meanwhile) is skipped and listed in ``errors``; the other items
    and steps go on. Raises MemoryRefused ``bad_request`` for unknown steps.
    """
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise bad_request(f"unknown consolidation step(s) {', '.join(map(str, unknown))}; steps are {', '.join(STEPS)}")
    started = time.monotonic()
    now = store.clock() if now is None else now
    report = Report(dry_run=dry_run, trigger=trigger, at=now)
    store.sync()  # hand edits first: a person's rejection wins over a merge
    ledger = LedgerReader.open(state_db)
    try:
        if "dedup" in steps:
            _run_dedup(store, ledger, config, report, now, dry_run)
        if "promote" in steps:
            _run_simple(store, report, "promote", "active", _plan_promote, (store, ledger, config), now, dry_run)
        if "decay" in steps:
            _run_simple(store, report, "decay", "stale", _plan_decay, (store, ledger, config, now), now, dry_run)
        if "retention" in steps:
            _run_retention(store, config, report, now, dry_run)
    finally:
        ledger.close()
    report.duration_s = time.monotonic() - started
    return report


def _row_action(store: "MemoryStore", step: str, entity_id: str, to: str, detail: dict) -> Action:
    row = store.projection.row(entity_id)
    return Action(step, entity_id, row["type"] if row else "", row["title"] if row else "",
                  row["status"] if row else "", to, detail)


def _run_dedup(store, ledger, config, report: Report, now: float, dry_run: bool) -> None:
    try:
        if not dry_run:
            _fill_vectors(store)
        plan = _plan_dedup(store, ledger, config, report)
    except Exception as exc:  # a broken step must not stop the others
        log.exception("consolidation: dedup failed")
        report.errors.append(_detail_error("dedup", "", exc))
        return
    for survivor, loser, match in plan:
        action = Action("dedup", loser.id, loser.type, loser.title, loser.status, "superseded",
                        {"superseded_by": survivor.id, "survivor_status": survivor.status, **match})
        if not dry_run:
            try:
                _merge(store, survivor.id, loser.id, match, now)
                action.applied = True
            except (MemoryRefused, OSError) as exc:
                report.errors.append(_detail_error("dedup", loser.id, exc))
                continue
        report.actions.append(action)


def _run_simple(store, report: Report, step: str, to: str, planner, args: tuple, now: float, dry_run: bool) -> None:
    try:
        plan = planner(*args)
    except Exception as exc:
        log.exception("consolidation: %s failed", step)
        report.errors.append(_detail_error(step, "", exc))
        return
    for entity_id, evidence in plan:
        detail = {"step": step, "evidence" if step == "promote" else "decay": evidence}
        action = _row_action(store, step, entity_id, to, detail)
        if not dry_run:
            try:
                _set_status(store, entity_id, to, detail, now)
                action.applied = True
            except (MemoryRefused, OSError) as exc:
                report.errors.append(_detail_error(step, entity_id, exc))
                continue
        report.actions.append(action)


def _run_retention(store, config, report: Report, now: float, dry_run: bool) -> None:
    try:
        plan = _plan_retention(store, config, now)
    except Exception as exc:
        log.exception("consolidation: retention failed")
        report.errors.append(_detail_error("retention", "", exc))
        return
    pruned = 0
    for entity_id, detail in plan:
        action = _row_action(store, "retention", entity_id, "pruned", detail)
        if not dry_run:
            try:
                action.detail = _prune(store, entity_id, detail, now)
                action.applied = True
                pruned += 1
            except (MemoryRefused, OSError) as exc:
                report.errors.append(_detail_error("retention", entity_id, exc))
                continue
        report.actions.append(action)
    if pruned:
        _erase_leftovers(store)
