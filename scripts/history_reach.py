#!/usr/bin/env python3
"""Why history's association list does or does not name a task's gold functions.

For each task of a range of the development set (default: tasks 76–150 of the newest 150, the
second half the replay scores), with the live set a daemon would have at the task's parent (the
newest ``[history] max_commits`` commits reachable from it), each gold function is put in one
class, checked in this order:

* ``never_changed`` — no live mined commit touched it (its id without a twin's ``~n``): history
  cannot hold it;
* ``in_list`` — it is in history's list as ranking gets it (``cogd.history.store.associated``,
  the first ``[history] max_associations``);
* ``no_match`` — none of the change requests that touched it matches the prompt's FTS5
  expression (the same words as ``lexical.query_terms``): the messages share no word with it;
* ``beyond_commits`` — one matches, but ranks below the ``association_commits`` best requests;
* ``request_member`` — a matched request holds its commit, but that commit's own row is not
  among the rows read (a pull request matched through another of its commits' messages), so the
  request's change as read leaves it out;
* ``per_commit`` — it is in a matched request's change but beyond its ``per_commit`` places;
* ``crowded`` — it has a vote, but the summed list ranks it below ``max_associations``.

With ``--replay OUT.json`` (a ``replay_sessions.py --out`` file) the same counts are also given
for the gold functions the named ``--arm``'s prompt packs missed (the replay's file rule: a
delivered file entity covers its functions). ``--variant NAME:key=value,…`` (``[history]`` keys)
adds, per variant, how many gold functions (and missed ones) its list holds: how far a change of
history's rules reaches, before any replay; and the CPU time of each read (this thread's, through
the in-memory view of the live set as the daemon reads it; the variants interleaved per task). Tests are left out of a request's change as the
daemon does only with ``test_changes = "wanted"`` and a prompt that does not talk about tests
(``hybrid.about_tests``, the short-prompt rule; commit messages are short).

    python scripts/history_reach.py [--git-dir DIR] [--last 150] [--first 76] [--replay r.json --arm full]
        [--variant nw1:name_weight=1] [--out reach.json]

Mining click's history takes about a minute on two cores; nothing is written into the git
directory (the scratch tree borrows its objects; ``_replay_tree.ScratchTree``).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _replay_tree import ScratchTree, clean_env, file_of, gold_form  # noqa: E402

DEFAULT_GIT_DIR = Path("/work/.mirror/pallets+click/repo")
DEFAULT_TASKS = Path(__file__).resolve().parent.parent.parent / "shared" / "eval-data" / "commits" / "pallets__click.jsonl"
CLASSES = ("never_changed", "in_list", "no_match", "beyond_commits", "request_member", "per_commit", "crowded")


def parse_variant(spec: str) -> tuple[str, dict]:
    """``"nw1:name_weight=1,request_order=named"`` → ``("nw1", {"name_weight": 1.0, ...})``: each
    value as the type of that ``[history]`` key's default (a word for a word key). Raises
    ValueError on a bad spec or a key ``[history]`` does not have."""
    from cogd.config import HistoryConfig

    defaults = HistoryConfig()
    name, sep, body = spec.partition(":")
    if not sep or not name:
        raise ValueError(f"variant {spec!r} is not NAME:key=value,...")
    values = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"variant {spec!r}: {part!r} is not key=value")
        key, value = key.strip(), value.strip().strip('"')
        if not hasattr(defaults, key):
            raise ValueError(f"variant {spec!r}: [history] has no key {key!r}")
        kind = type(getattr(defaults, key))
        values[key] = value.lower() == "true" if kind is bool else kind(float(value)) if kind is int else kind(value)
    return name, values


def missed_gold(path: Path, arm: str) -> dict[str, set[str]]:
    """``{commit: gold functions the arm's prompt pack missed}`` from a replay's ``--out`` file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for result in data["arms"]:
        if result["arm"] != arm:
            continue
        out = {}
        for record in result["records"]:
            items = record["pack"]["items"]
            ids = {gold_form(i["id"]) for i in items}
            files = {i["path"] for i in items if i["kind"] == "file"}
            out[record["commit"]] = {g for g in record["gold_functions"] if g not in ids and file_of(g) not in files}
        return out
    raise ValueError(f"{path} has no arm {arm!r}")


def classify(conn, gold: str, match: str, query: str, settings, leave_out, terms, listed: list[str]) -> str:
    """One gold function's class (:data:`CLASSES`, see the module doc) for one task's live set."""
    from cogd.history import store as hs

    touched = {h for (h,) in conn.execute(
        "SELECT t.hash FROM touched t JOIN commits m ON m.hash = t.hash WHERE m.live = 1 AND m.skipped IS NULL "
        "AND (t.entity_id = ? OR t.entity_id LIKE ?)", (gold, gold + "~%"))}
    if not touched:
        return "never_changed"
    if gold in listed:
        return "in_list"
    wide = dataclasses.replace(settings, commits=10 ** 6)
    every = hs._matched_requests(hs._rows(conn, match, wide, hs.digest(query), None), wide)
    read = hs._matched_requests(hs._rows(conn, match, settings, hs.digest(query), None), settings)
    if settings.request_members == "all":
        hs.with_members(conn, read)
    marks = ",".join("?" * len(touched))
    mine = {request for (request,) in conn.execute(
        f"SELECT CASE WHEN r.live = 1 THEN s.request ELSE s.hash END FROM messages s LEFT JOIN commits r "
        f"ON r.hash = s.request WHERE s.hash IN ({marks})", sorted(touched))}
    if not mine & set(every):
        return "no_match"
    if not mine & set(read):
        return "beyond_commits"
    lines = hs._changed_lines(conn, sorted({h for item in read.values() for h in item[2]}), None)
    named = hs._memo(hs._shares_word(terms)) if settings.request_order == "named" and terms else None
    best = None
    for key in mine & set(read):
        changed = {gold_form(e): n for e, n in hs._request_change(read[key][2], lines, leave_out).items()}
        if gold not in changed:
            continue
        order = (sorted(changed, key=lambda e: (-changed[e], e)) if named is None
                 else sorted(changed, key=lambda e: (not named(e), -changed[e], e)))
        best = min(best or 10 ** 9, order.index(gold) + 1)
    if best is None:
        return "request_member"
    return "per_commit" if best > settings.per_commit else "crowded"


def main(argv: list[str] | None = None) -> int:  # long: one report, its steps in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", type=Path, default=DEFAULT_GIT_DIR)
    parser.add_argument("--tasks", type=Path, default=DEFAULT_TASKS)
    parser.add_argument("--last", type=int, default=150, help="the newest N tasks (default 150)")
    parser.add_argument("--first", type=int, default=76, help="the first task counted, 1-based (default 76)")
    parser.add_argument("--replay", type=Path, default=None, help="a replay_sessions.py --out file")
    parser.add_argument("--arm", default="full", help="the replay arm whose misses are counted (default full)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=V,...")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a [history] key for the classification itself (e.g. test_changes=wanted)")
    parser.add_argument("--out", type=Path, default=None, help="write every gold function's class here (JSON)")
    args = parser.parse_args(argv)

    from cogd.config import HistoryConfig
    from cogd.history import store as hs
    from cogd.history.miner import HistoryMiner
    from cogd.history.store import HistoryStore, live_view
    from cogd.retrieve.hybrid import about_tests, is_test_path
    from cogd.retrieve.lexical import match_expression, query_terms

    rows = [json.loads(line) for line in args.tasks.read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = rows[-args.last:]
    base = dataclasses.replace(HistoryConfig(), **(parse_variant("base:" + ",".join(args.set))[1] if args.set else {}))
    variants = [("base", base)] + [(name, dataclasses.replace(base, **values))
                                   for name, values in map(parse_variant, args.variant)]
    missed = missed_gold(args.replay, args.arm) if args.replay else None
    with tempfile.TemporaryDirectory(prefix="cogd-reach-") as scratch:
        tree = ScratchTree(args.git_dir.resolve(), Path(scratch))
        tree.move(tasks[-1]["parent"])
        (tree.root / ".cogd" / "index").mkdir(parents=True)
        store = HistoryStore(tree.root / ".cogd" / "index" / "history.db")
        try:
            print("mining:", HistoryMiner(tree.root, store, base).sync(), file=sys.stderr)
            conn = store.reader()
            classes, held, report = collections.Counter(), collections.Counter(), []
            cpu: dict[str, list[float]] = collections.defaultdict(list)
            for n, task in enumerate(tasks, 1):
                if n < args.first or not task["gold_functions"]:
                    continue
                live = subprocess.run(["git", f"--git-dir={args.git_dir}", "rev-list", f"--max-count={base.max_commits}",
                                       task["parent"]], capture_output=True, text=True, check=True,
                                      env=clean_env()).stdout.split()
                store.set_live(set(live))
                view = live_view(conn, (n,), base.co_change_max_definitions)  # the daemon's in-memory path
                query, terms = task["query"], query_terms(task["query"])
                match = match_expression(terms)
                gold = list(dict.fromkeys(task["gold_functions"]))
                lost = missed.get(task["commit"], set()) if missed is not None else set()
                for name, config in variants:
                    settings = hs.AssociationSettings(config.association_commits, config.per_commit,
                                                      config.half_life_days, config.request_decay,
                                                      config.min_match_share, config.name_weight, config.request_order,
                                                      config.request_members)
                    leave_out = is_test_path if config.test_changes == "wanted" and not about_tests(query) else None
                    started = time.thread_time()
                    found = hs.associated(conn, match, settings, query if config.mask_exact_message else None,
                                          view=view, leave_out=leave_out, terms=terms)
                    cpu[name].append(time.thread_time() - started)
                    listed = [gold_form(a.entity_id) for a in found[: config.max_associations]]
                    held[(name, "gold")] += len(set(gold) & set(listed))
                    held[(name, "missed")] += len(lost & set(listed))
                    if name != "base":
                        continue
                    for g in gold:
                        found = classify(conn, g, match, query, settings, leave_out, terms, listed)
                        classes[("all", found)] += 1
                        if g in lost:
                            classes[("missed", found)] += 1
                        report.append({"task": n, "fold": task.get("fold"), "query": query.split("\n")[0][:120],
                                       "gold": g, "class": found, "missed": g in lost if missed is not None else None})
        finally:
            store.close()
    total = sum(v for (scope, _), v in classes.items() if scope == "all")
    lost_total = sum(v for (scope, _), v in classes.items() if scope == "missed")
    print(f"tasks {args.first}-{len(tasks)} of the newest {len(tasks)}: {total} gold functions"
          + (f", {lost_total} missed by arm {args.arm}" if missed is not None else ""))
    print("| class | gold functions |" + (" missed |" if missed is not None else ""))
    print("|---|---|" + ("---|" if missed is not None else ""))
    for found in CLASSES:
        print(f"| {found} | {classes[('all', found)]} |" + (f" {classes[('missed', found)]} |" if missed is not None else ""))
    print("\n| history settings | gold in history's list |" + (" missed gold in it |" if missed is not None else "")
          + " read's CPU p50 / p95 (ms) |")
    print("|---|---|" + ("---|" if missed is not None else "") + "---|")
    for name, _config in variants:
        times = sorted(cpu[name]) or [0.0]
        print(f"| {name} | {held[(name, 'gold')]} of {total} |"
              + (f" {held[(name, 'missed')]} of {lost_total} |" if missed is not None else "")
              + f" {1000 * statistics.median(times):.2f} / {1000 * times[int(0.95 * (len(times) - 1))]:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
