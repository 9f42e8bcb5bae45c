"""The viewer's pages: each function turns the daemon's answers into one template's context.

One function per page (overview, sessions, one session, code, one entity, memory, one memory,
ask); each takes a :class:`~cogd.ui.source.Source` and the page's query parameters (strings,
as typed into the address bar: untrusted) and returns ``(template name, context)``. Errors
propagate: a RemoteError (an unknown id: ``not_found``) or DaemonUnavailable, which the
application turns into an error page (:mod:`cogd.ui.app`).
"""

from __future__ import annotations

from collections import Counter

from cogd.rpc.client import RemoteError
from cogd.ui import charts
from cogd.ui.source import Source

CHARS_PER_TOKEN = 4  # tokens per pack are estimated as characters / 4, as scripts/replay_sessions.py does
SESSION_CHART_LIMIT = 30  # the hit rate per session chart shows the latest this many sessions
FILE_CHART_LIMIT = 15
PAGE_ROWS = 50  # rows per page of the long lists (sessions, memories)

#: Columns of the code page's table a visitor may sort by, with their default direction.
FILE_SORTS = {"path": "asc", "entities": "desc", "retrieval_count": "desc", "used_count": "desc",
              "ignored_count": "desc", "utility": "desc"}


def paginate(rows: list, page: str, per: int = PAGE_ROWS) -> tuple[list, dict]:
    """One page of ``rows`` and where it is: ``(rows on it, {"page", "pages", "total", "first",
    "last"})``, pages counted from 1, ``first``/``last`` the 1-based positions of the rows shown
    (0 and 0 when there are none).

    ``page``: the query parameter as typed (untrusted): not a positive number is page 1, a page
    past the last is the last (an address kept from when there were more rows still shows some).
    """
    pages = max(1, -(-len(rows) // per))
    number = int(page) if page.isascii() and page.isdigit() and len(page) < 10 else 1
    number = min(max(number, 1), pages)
    start = (number - 1) * per
    shown = rows[start:start + per]
    return shown, {"page": number, "pages": pages, "total": len(rows),
                   "first": start + 1 if shown else 0, "last": start + len(shown)}


def overview(source: Source) -> tuple[str, dict]:
    """Index size and freshness, embedding coverage and daemon health (as ``cogd status``), the
    ledger's totals (as ``cogd stats``), and per day: hit rate, deliveries, tokens per pack."""
    status, stats = source.call("status"), source.call("stats")
    days = source.call("usage.daily")["days"]
    sessions = source.call("usage.sessions", {"limit": SESSION_CHART_LIMIT})["sessions"][::-1]
    per_session = [(s["session_id"][:12], s["hits"] / (s["hits"] + s["misses"]) if s["hits"] + s["misses"] else None)
                   for s in sessions]
    return "overview.html", {
        "status": status, "stats": stats, "days": days,
        "hit_rate_chart": charts.line_chart([(d["day"], d["hit_rate"]) for d in days], "hit rate per day"),
        "session_chart": charts.line_chart(per_session, "hit rate per session"),
        "deliveries_chart": charts.bar_chart([(d["day"], d["deliveries"]) for d in days], "deliveries per day",
                                             "deliveries"),
        "tokens_chart": charts.bar_chart([(d["day"], tokens_per_pack(d)) for d in days], "tokens per pack per day",
                                         "tokens per pack"),
        "tokens_per_pack": [(d["day"], tokens_per_pack(d)) for d in days],
    }


def tokens_per_pack(day: dict) -> int:
    """A day's mean pack size in estimated tokens (characters / CHARS_PER_TOKEN, rounded)."""
    return round(day["chars"] / CHARS_PER_TOKEN / day["deliveries"]) if day["deliveries"] else 0


def sessions(source: Source, page: str = "1") -> tuple[str, dict]:
    """Every session with a delivery, latest first, with its outcome counts."""
    shown, pager = paginate(source.call("usage.sessions", {"limit": 1000})["sessions"], page)
    return "sessions.html", {"sessions": shown, "pager": pager}


def session(source: Source, session_id: str, explain: str = "") -> tuple[str, dict]:
    """One session's deliveries in order, each item with its outcome and evidence: the tool
    uses that touched its lines while its delivery was open (:func:`evidence`). ``explain``: the
    id of one prompt delivery whose prompt is ranked again now (:func:`explain_now`)."""
    found = source.call("usage.session", {"session_id": session_id})
    deliveries = found["deliveries"]
    for delivery in deliveries:
        delivery["tokens"] = round(delivery["size_chars"] / CHARS_PER_TOKEN)
        delivery["explained"] = str(delivery["id"]) == explain and bool(delivery["query"])
        if delivery["explained"]:
            explain_now(source, delivery)
        for item in delivery["items"]:
            item["evidence"] = evidence(item, delivery, found["tool_uses"])
    return "session.html", {"session_id": session_id, "deliveries": deliveries, "tool_uses": found["tool_uses"]}


def explain_now(source: Source, delivery: dict) -> None:
    """Rank ``delivery``'s prompt again (``record`` false: nothing is recorded) and give each of
    its items ``now``: its rank and ranking signals in today's pack, or None when today's pack
    leaves it out, to set beside the signals the ledger kept from the delivery itself."""
    pack = source.call("context.prompt", {"session_id": "cogd-ui", "prompt": delivery["query"], "record": False})
    ranked = {item["entity_id"]: item for item in pack["items"]}
    for item in delivery["items"]:
        again = ranked.get(item["entity_id"])
        item["now"] = {"rank": again["rank"], "signals": again.get("signals") or {}} if again else None


def evidence(item: dict, delivery: dict, tool_uses: list[dict]) -> list[dict]:
    """The touches of ``tool_uses`` on ``item``'s file that overlap its lines (a touch without
    lines is the whole file), made while ``delivery`` was open (from its ``created_at`` to its
    ``closed_at``, unix s): ``[{tool, action, start_line, end_line, at}]``, in order."""
    out = []
    for use in tool_uses:
        if use["created_at"] < delivery["created_at"]:
            continue
        if delivery.get("closed_at") is not None and use["created_at"] > delivery["closed_at"]:
            continue
        for touch in use["touches"]:
            start, end = touch.get("start_line"), touch.get("end_line")
            if touch.get("path") != item["path"]:
                continue
            if start is not None and end is not None and (end < item["start_line"] or start > item["end_line"]):
                continue
            out.append({"tool": use["tool_name"], "action": touch.get("action", ""), "start_line": start,
                        "end_line": end, "at": use["created_at"]})
    return out


def code(source: Source, sort: str, order: str) -> tuple[str, dict]:
    """Usage per file, sortable by any of FILE_SORTS (an unknown column sorts by deliveries),
    with a bar chart of the files of highest utility."""
    files = source.call("usage.files")["files"]
    sort = sort if sort in FILE_SORTS else "retrieval_count"
    order = order if order in ("asc", "desc") else FILE_SORTS[sort]
    files.sort(key=lambda f: (f[sort], f["path"]), reverse=order == "desc")
    best = sorted(files, key=lambda f: (-f["utility"], f["path"]))[:FILE_CHART_LIMIT]
    return "code.html", {"files": files, "sort": sort, "order": order, "sorts": FILE_SORTS,
                         "chart": charts.hbar_chart([(f["path"], f["utility"]) for f in best],
                                                    "utility by file (highest first)")}


def entity(source: Source, entity_id: str) -> tuple[str, dict]:
    """One code entity: its source span and text, callers and callees, edges, usage and utility."""
    found = source.call("entity.get", {"id": entity_id})
    callers = source.call("graph.callers", {"id": entity_id, "limit": 100})
    callees = source.call("graph.callees", {"id": entity_id, "limit": 100})
    return "entity.html", {**found, "callers": callers, "callees": callees}


def memory(source: Source, type_: str, status: str, page: str = "1") -> tuple[str, dict]:
    """Memories by type and status (a count table), the list filtered by ``type_``/``status``
    (empty: all) a page at a time (:func:`paginate`), and the tombstones: rejected and pruned
    memories with the reason of their rejection."""
    everything = source.call("memory.list")["memories"]
    counts = Counter((m["type"], m["status"]) for m in everything)
    types = sorted({m["type"] for m in everything})
    statuses = sorted({m["status"] for m in everything})
    shown = [m for m in everything if (not type_ or m["type"] == type_) and (not status or m["status"] == status)]
    reasons, erased = {}, []
    for event in source.call("memory.events")["events"]:
        if event["new_status"] == "rejected":
            reasons[event["entity_id"]] = ((event.get("detail") or {}).get("reason") or "", event["at"],
                                           event["redacted"])
        if event["action"] == "purge":
            erased.append(event)
    tombstones = [{**m, "reason": reasons.get(m["id"], ("", None, False))}
                  for m in everything if m["status"] in ("rejected", "pruned")]
    shown, pager = paginate(shown, page)
    return "memory.html", {"memories": shown, "pager": pager, "counts": counts, "types": types, "statuses": statuses,
                           "type": type_, "status": status, "tombstones": tombstones, "erased": erased,
                           "candidates": counts_of(counts, "candidate")}


def counts_of(counts: Counter, status: str) -> int:
    """How many memories of any type have ``status``."""
    return sum(n for (_, s), n in counts.items() if s == status)


def memory_item(source: Source, memory_id: str) -> tuple[str, dict]:
    """One memory: its record, file text, every event (actor, time, move, pre-image; redacted
    ones say so) and each anchor with its staleness: ``current`` when the anchored entity's
    hash is the one written with the anchor, ``changed`` when not, ``gone`` when it no longer exists."""
    try:
        found = source.call("memory.get", {"id": memory_id})
    except RemoteError as exc:
        if exc.kind != "not_found":
            raise
        found = erased_memory(source, memory_id)
        if found is None:
            raise
    anchors = []
    for anchor in found["record"].get("anchors") or []:
        try:
            now = source.call("entity.get", {"id": anchor["entity"]})["entity"]["hash"]
        except RemoteError as exc:  # not_found: the entity was removed or renamed
            if exc.kind != "not_found":
                raise
            now = None
        state = "gone" if now is None else "current" if now == anchor.get("hash") else "changed"
        anchors.append({**anchor, "now": now, "state": state})
    return "memory_item.html", {**found, "anchors": anchors}


def erased_memory(source: Source, memory_id: str) -> dict | None:
    """What is left of a purged memory: its events (their text redacted to hashes), as
    :func:`memory_item`'s ``found``; None when the ledger has no event of ``memory_id`` either."""
    events = source.call("memory.events", {"entity": memory_id})["events"]
    if not events:
        return None
    record = {"id": memory_id, "title": "", "type": "–", "status": "erased", "source": "–",
              "created_at": events[0]["at"], "updated_at": events[-1]["at"], "anchors": [],
              "supersedes": None, "superseded_by": None,
              "body": "(erased: the file and its text are gone; the events below keep hashes only)"}
    return {"record": record, "events": events, "problem": None}


def ask(source: Source, prompt: str) -> tuple[str, dict]:
    """The pack cogd would deliver for ``prompt`` now, with each item's ranking signals; asked
    with ``record`` false, so no delivery is recorded (:class:`~cogd.ui.source.Source` insists)."""
    pack = source.call("context.prompt", {"session_id": "cogd-ui", "prompt": prompt, "record": False}) if prompt else None
    return "ask.html", {"prompt": prompt, "pack": pack}
