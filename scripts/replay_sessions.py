#!/usr/bin/env python3
"""Replay agent sessions over pallets/click's history and measure whether cogd's packs learn.

The learning evaluation. For every task of the development set
(``../shared/eval-data/commits/pallets__click.jsonl``: a commit message as the
prompt, the parent commit, the files and functions the commit changed),
oldest first, the script

1. moves a scratch work tree (a temporary directory, never inside the project)
   to the task's parent commit with a private ``GIT_INDEX_FILE`` and ``git
   read-tree -u -m`` (nothing is written into the git directory; a snapshot of
   it is compared at the end of every arm). The tree is a git repository of its
   own (``tree/.git`` with ``objects/info/alternates`` naming the git
   directory's objects, ``HEAD`` detached at the parent), because cogd's
   recency signal and overview read ``git log``/``git status``;
   ``--no-git-repo`` makes it a plain directory as ``eval_retrieval.py`` does. It lets the tree's daemon re-index
   (``index.refresh`` with wait) and, in hybrid mode, waits until the embedder
   has caught up (the coverage at prompt time is recorded either way);
2. replays one Claude Code session through the real ``cogd-hook`` process,
   with payloads shaped like ``tests/fixtures/hook-payloads/`` (``cwd`` = the
   tree): SessionStart (``source: startup``), UserPromptSubmit (the commit
   message), then a simulated agent — one Grep (``files_with_matches``) for a
   word of the prompt listing the gold and distractor files, whole-file Reads of
   2–3 distractor files (files the pack delivered that are not gold, else other
   indexed files; chosen by a generator seeded with the task's commit), Reads
   of the gold files (``offset``/``limit`` spanning their gold functions, whole
   file otherwise), one Edit per gold function whose ``structuredPatch`` hunk
   covers the function's span at the parent commit (from the tree's
   ``.cogd/index/index.db``, read-only; a gold file without a known function
   gets the commit's real diff hunks on the parent side) — and SessionEnd
   (``reason: prompt_input_exit``). Every hook process gets ``COGD_NOW`` =
   the task's commit time plus a few seconds per event (kept increasing across
   tasks); the daemon takes it as the clock when the tree's config says
   ``[usage] trust_client_clock = true``;
3. scores the prompt pack **before** the session's own feedback
   (prequential): the pack is read from ``.cogd/state.db`` (read-only: the
   session's newest ``deliveries`` row with event ``prompt`` and its
   ``delivery_items``) right after the UserPromptSubmit hook, and cross-checked
   against the ids in the hook's ``additionalContext``;
4. after SessionEnd, reads the outcomes the daemon resolved for the session's
   delivery items (``hit`` when touched after delivery, ``miss`` at the next
   delivery or at session end).

Arms (each with its own scratch tree, ``.cogd/`` and daemon, one after the
other, in one invocation; ``[rank]`` keys in the tree's ``config.toml``, and for
``--candidate`` arms also the ``[history]`` keys of :data:`HISTORY_CANDIDATE_KEYS`):

* ``off`` — feedback off: ``utility_weight = 0``, ``working_set_weight = 0``,
  ``recency_weight = 0``, ``association_weight = 0``, and history off
  (``history_association_weight = 0``, ``co_change_weight = 0``);
* ``on`` — session feedback as shipped, history off;
* ``recency`` — the recency-only control: ``utility_weight = 0``,
  ``working_set_weight = 0``, ``association_weight = 0``, ``recency_weight = 0.3``, history off;
* ``history`` — history as shipped (association and co-change), no session feedback;
* ``full`` — cogd's defaults: history and session feedback (the full learning arm).

With history mined (a git tree, ``[history] enabled``), every task waits until the daemon's
miner has synchronised with the task's parent, so a pack uses exactly the history reachable
from it (nothing after it).

The vectors of an unchanged entity are the same in every arm, so by default the
first arm's embedding cache is copied into the next arms' trees before their
daemons start (``--no-share-cache`` re-embeds from scratch).

Metrics (per session, then per block of ``--block`` sessions and over the
second half of the stream; in per cent)
--------------------------------------------------------------------------
* **file R**: share of the gold files in which the prompt pack delivered any
  item (full item or one-line pointer);
* **fn R**: share of the gold functions delivered — the entity itself, or its
  file's entity (``fn R entity`` in the JSON drops the file rule); cogd's
  ``name~2`` twins count as ``name``. Over sessions with gold functions;
* **file R@5**, **fn R@5**, **fn MRR**: the same over the pack's first five
  items, and 1 / rank of the first gold function — the pack's *order*, which
  feedback changes before it changes what fits the budget;
* **hit rate**: hits / delivered items (full items and pointers) of the
  session's prompt pack, pooled over the block's sessions (``hit rate (all
  packs)`` also counts the SessionStart pack); **hits on distractors**: the
  share of those hits in the distractor files, which the agent read once and
  never edited;
* **tokens/pack**: the prompt pack's characters / 4 (an approximation, not a
  tokenizer).

All of them are the pack as delivered within its budget (``[pack] max_chars``,
default 8,000 characters), macro-averaged over sessions except the pooled hit
rates. Relative gain = (arm − baseline) / baseline.

How to run
----------
    /tmp/venv/bin/python scripts/replay_sessions.py [--limit 40] [--mode bm25] [--out r.json]

``--git-dir`` defaults to ``/work/.mirror/pallets+click/repo`` when it exists.
The slice is reproducible: the newest ``--last`` (150) tasks, then ``--offset``
and ``--limit``; distractors and session ids derive from ``--seed`` (0) and the
commit. Other options: ``--arms off,on,recency``, ``--block 25``, ``--set
section.key=value`` (repeatable, all arms), ``--embed-timeout 900`` (seconds per
wait), ``--keep`` (keep scratch trees; daemons are stopped anyway), ``--cv-recall fn_R_entity`` (the folds
chosen and judged on the functions' own entities, not crediting a delivered file entity with
its functions). Run it with
the interpreter of cogd's environment; cogd is used through its console scripts
(and its socket client). Exit status 1 when an arm failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _replay_cv  # noqa: E402
from _replay_tree import (  # noqa: E402
    BIN, PROJECT, Daemon, ReplayError, ScratchTree, clean_env, file_of, gold_form, render_config, run, snapshot,
)

DEFAULT_TASKS = PROJECT.parent / "shared" / "eval-data" / "commits" / "pallets__click.jsonl"
DEFAULT_GIT_DIR = Path("/work/.mirror/pallets+click/repo")
FIXTURES = PROJECT / "tests" / "fixtures" / "hook-payloads"
HOOK_DEADLINE_MS = 60_000  # measured, not dropped: the shipped deadline is 1,500 ms
SESSION_NAMESPACE = uuid.UUID("6c0f3e52-8a1b-4d2e-9f00-c0dd0e5e55e5")
READ_MAX_LINES = 2000  # Claude Code's Read returns at most this many lines without a limit
ARMS: dict[str, dict[str, str]] = {
    "off": {"utility_weight": "0", "working_set_weight": "0", "recency_weight": "0", "association_weight": "0",
            "history_association_weight": "0", "co_change_weight": "0"},
    # session feedback as shipped, history off: the feedback arm of the replays before history
    "on": {"history_association_weight": "0", "co_change_weight": "0"},
    "recency": {"utility_weight": "0", "working_set_weight": "0", "association_weight": "0", "recency_weight": "0.3",
                "history_association_weight": "0", "co_change_weight": "0"},
    # what the repository's own history gives with no session feedback at all
    "history": {"utility_weight": "0", "working_set_weight": "0", "recency_weight": "0", "association_weight": "0"},
    # the full learning arm: cogd's defaults (history and session feedback)
    "full": {},
}
# --candidate keys and their short names in an arm's name (u0.5_a0.5_r0_k10)
CANDIDATE_KEYS = {"utility_weight": "u", "association_weight": "a", "recency_weight": "r", "working_set_weight": "w",
                  "evidence_k": "k", "history_association_weight": "h", "co_change_weight": "c",
                  "history_evidence_k": "hk", "association_combine": "ac",
                  "utility_history_k": "uhk", "association_history_k": "ahk",
                  "utility_with_history": "uwh", "same_change_days": "scd",
                  "request_decay": "rd", "min_match_share": "mm", "test_changes": "tc",
                  "name_weight": "nw", "request_order": "ro", "association_commits": "hc", "per_commit": "pc",
                  "max_associations": "ma", "co_change_min_confidence": "ccm", "request_members": "rm",
                  "history_file_prior": "hfp", "history_file_prior_files": "hfpf"}
# --candidate keys that live in [history], not [rank] (how history's association list is built)
HISTORY_CANDIDATE_KEYS = ("request_decay", "min_match_share", "test_changes", "name_weight", "request_order",
                          "association_commits", "per_commit", "max_associations", "co_change_min_confidence",
                          "request_members")
# --candidate keys whose value is a word (a TOML string), not a number, and the words allowed
WORD_KEYS = {"association_combine": ("sum", "max", "pooled", "single"), "utility_with_history": ("both", "once"),
             "test_changes": ("always", "wanted"), "request_order": ("lines", "named"),
             "request_members": ("read", "all")}
# Seconds after the session's start at which each event happens (on the injected clock).
T_PROMPT, T_STEP, T_END, T_GAP = 3, 20, 30, 60
STOPWORDS = set("""
about above after again also because been before being below between both could does doing down during each
from further have having here into itself just more most other over same should some such than that their
them then there these they this those through under until very were what when where which while will with
would your instead allow allows added adds make makes made only when used uses using fixed fixes support
""".split())
_ID_LINE = re.compile(r"^\s*id: `(.+)`\s*$|^- `([^`]+)` \(")


# ---------------------------------------------------------------- payloads

def _template(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


class Session:
    """One simulated Claude Code session: builds payloads and runs the real hook per event."""

    def __init__(self, tree: Path, transcripts: Path, session_id: str, t0: float, timings: dict):
        self.tree = tree
        self.session_id = session_id
        self.transcript = str(transcripts / f"{session_id}.jsonl")
        self.now = t0
        self.timings = timings
        self.tool_n = 0

    def _fill(self, payload: dict) -> dict:
        payload["session_id"] = self.session_id
        if "transcript_path" in payload:
            payload["transcript_path"] = self.transcript
        if "cwd" in payload:
            payload["cwd"] = str(self.tree)
        payload.pop("prompt_id", None)
        return payload

    def hook(self, event: str, payload: dict, at: float) -> str:
        """Run ``cogd-hook EVENT`` with ``payload`` on stdin and ``COGD_NOW=at``; returns its stdout."""
        self.now = at
        env = clean_env({"COGD_NOW": f"{at:.3f}", "COGD_HOOK_DEADLINE_MS": str(HOOK_DEADLINE_MS)})
        started = time.perf_counter()
        proc = run([str(BIN / "cogd-hook"), event], env=env, input=json.dumps(payload), cwd=self.tree,
                   timeout=HOOK_DEADLINE_MS / 1000 + 30, check=False)
        self.timings.setdefault(event, []).append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise ReplayError(f"cogd-hook {event} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
        return proc.stdout

    def start(self, at: float) -> None:
        payload = self._fill(_template("session_start.startup.json"))
        payload["source"] = "startup"
        self.hook("session-start", payload, at)

    def prompt(self, text: str, at: float) -> str:
        payload = self._fill(_template("user_prompt_submit.json"))
        payload["prompt"] = text
        out = self.hook("prompt-submit", payload, at)
        if not out.strip():
            return ""
        return json.loads(out)["hookSpecificOutput"]["additionalContext"]

    def _tool(self, template: str, tool_input: dict, tool_response: dict, at: float) -> None:
        payload = self._fill(_template(template))
        self.tool_n += 1
        payload["tool_input"] = tool_input
        payload["tool_response"] = tool_response
        payload["tool_use_id"] = f"toolu_{uuid.uuid5(SESSION_NAMESPACE, f'{self.session_id}:{self.tool_n}').hex[:24]}"
        self.hook("post-tool-use", payload, at)

    def grep(self, pattern: str, files: list[str], at: float) -> None:
        """A ``files_with_matches`` Grep over the tree; ``files`` are relative to ``cwd`` (as Claude Code sends them)."""
        self._tool("post_tool_use.grep.files_with_matches.json",
                   {"pattern": pattern, "path": str(self.tree), "output_mode": "files_with_matches"},
                   {"mode": "files_with_matches", "filenames": files, "numFiles": len(files)}, at)

    def read(self, rel: str, at: float, span: tuple[int, int] | None = None) -> dict:
        """A Read of ``rel``: the whole file (first 2,000 lines), or ``offset``/``limit`` covering ``span``."""
        path = self.tree / rel
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        total = len(lines)
        tool_input: dict = {"file_path": str(path)}
        if span is None:
            start, count = 1, min(total, READ_MAX_LINES)
        else:
            start = max(1, span[0])
            count = max(1, min(span[1], total) - start + 1)
            tool_input.update({"offset": start, "limit": count})
        content = "".join(lines[start - 1:start - 1 + count])
        self._tool("post_tool_use.read.range.json", tool_input,
                   {"type": "text", "file": {"filePath": str(path), "content": content, "numLines": count,
                                             "startLine": start, "totalLines": total}}, at)
        return {"path": rel, "offset": start if span else None, "lines": count}

    def edit(self, rel: str, hunk: tuple[int, int] | None, at: float) -> dict:
        """An Edit of ``rel`` whose ``structuredPatch`` is one hunk over ``hunk`` (lines unchanged in number).

        The tree itself is not changed: the next task moves it to the next
        parent anyway, and the hunk's lines are the parent's lines. ``hunk``
        None sends an Edit without a patch (a file-level touch).
        """
        path = self.tree / rel
        original = path.read_text(encoding="utf-8", errors="replace")
        lines = original.splitlines()
        patch = []
        old = new = ""
        if hunk is not None and lines:
            start = min(max(hunk[0], 1), len(lines))
            end = min(max(hunk[1], start), len(lines))
            body = lines[start - 1:end]
            old, new = body[-1], body[-1] + "  # replayed edit"
            patch = [{"oldStart": start, "oldLines": len(body), "newStart": start, "newLines": len(body),
                      "lines": [" " + x for x in body[:-1]] + ["-" + old, "+" + new]}]
        self._tool("post_tool_use.edit.json",
                   {"file_path": str(path), "old_string": old, "new_string": new, "replace_all": False},
                   {"filePath": str(path), "oldString": old, "newString": new, "originalFile": original,
                    "structuredPatch": patch, "userModified": False, "replaceAll": False}, at)
        return {"path": rel, "hunk": list(hunk) if hunk else None}

    def end(self, at: float) -> None:
        payload = self._fill(_template("session_end.prompt_input_exit.json"))
        self.hook("session-end", payload, at)


# ---------------------------------------------------------------- read-only views of cogd's databases

def _ro(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def prompt_delivery(state_db: Path, session_id: str) -> dict | None:
    """The session's newest prompt delivery with its items (rank order), from ``state.db``."""
    conn = _ro(state_db)
    try:
        row = conn.execute("SELECT * FROM deliveries WHERE session_id = ? AND event = 'prompt' ORDER BY id DESC LIMIT 1",
                           (session_id,)).fetchone()
        if row is None:
            return None
        items = [dict(r) for r in conn.execute("SELECT * FROM delivery_items WHERE delivery_id = ? ORDER BY rank",
                                               (row["id"],))]
        return {**dict(row), "items": items}
    finally:
        conn.close()


def session_outcomes(state_db: Path, session_id: str) -> dict:
    """Outcome counts of the session's delivery items by delivery event, plus its tool uses."""
    conn = _ro(state_db)
    try:
        out: dict = {}
        for row in conn.execute(
                "SELECT d.event AS event, i.outcome AS outcome, i.pointer AS pointer, count(*) AS n "
                "FROM deliveries d JOIN delivery_items i ON i.delivery_id = d.id WHERE d.session_id = ? "
                "GROUP BY d.event, i.outcome, i.pointer", (session_id,)):
            bucket = out.setdefault(row["event"], {"hit": 0, "miss": 0, "pending": 0, "items": 0, "full_hit": 0,
                                                   "full_items": 0})
            bucket[row["outcome"]] = bucket.get(row["outcome"], 0) + row["n"]
            bucket["items"] += row["n"]
            if not row["pointer"]:
                bucket["full_items"] += row["n"]
                if row["outcome"] == "hit":
                    bucket["full_hit"] += row["n"]
        out["tool_uses"] = conn.execute("SELECT count(*) FROM tool_uses WHERE session_id = ?",
                                        (session_id,)).fetchone()[0]
        hit_ids = [r[0] for r in conn.execute(
            "SELECT i.entity_id FROM deliveries d JOIN delivery_items i ON i.delivery_id = d.id "
            "WHERE d.session_id = ? AND d.event = 'prompt' AND i.outcome = 'hit' ORDER BY i.rank", (session_id,))]
        out["prompt_hit_ids"] = hit_ids
        return out
    finally:
        conn.close()


def gold_spans(index_db: Path, gold_functions: list[str]) -> dict[str, tuple[int, int]]:
    """Gold function id → (start_line, end_line) at the indexed commit (first twin of a repeated name)."""
    wanted = set(gold_functions)
    spans: dict[str, tuple[int, int]] = {}
    conn = _ro(index_db)
    try:
        for path in sorted({file_of(g) for g in wanted}):
            for row in conn.execute("SELECT id, start_line, end_line FROM entities WHERE path = ? "
                                    "AND kind IN ('function', 'method') ORDER BY start_line", (path,)):
                gid = gold_form(row["id"])
                if gid in wanted and gid not in spans:
                    spans[gid] = (row["start_line"], row["end_line"])
    finally:
        conn.close()
    return spans


def indexed_files(index_db: Path) -> list[str]:
    conn = _ro(index_db)
    try:
        return [r[0] for r in conn.execute("SELECT path FROM files WHERE status = 'ok' ORDER BY path")]
    finally:
        conn.close()


def pack_ids(text: str) -> list[str]:
    """Entity ids of a rendered pack in order (full items' ``id:`` lines, then pointers), fences skipped."""
    ids, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        match = _ID_LINE.match(line)
        if match:
            ids.append(match.group(1) or match.group(2))
    return ids


# ---------------------------------------------------------------- the simulated agent

def grep_word(query: str) -> str:
    """The word an agent would grep for: the longest identifier-like word of the prompt (first on ties)."""
    words = [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", query) if w.lower() not in STOPWORDS]
    if not words:
        return "def"
    best = max(len(w) + (3 if ("_" in w or any(c.isupper() for c in w[1:])) else 0) for w in words)
    return next(w for w in words if len(w) + (3 if ("_" in w or any(c.isupper() for c in w[1:])) else 0) == best)


def pick_distractors(rng: random.Random, delivered_paths: list[str], gold_files: set[str], all_files: list[str],
                     tree: Path) -> list[str]:
    """2–3 non-gold files: from the pack's files first, then from all indexed files."""
    want = rng.choice((2, 3))
    pool = sorted({p for p in delivered_paths if p not in gold_files and (tree / p).is_file()})
    chosen = rng.sample(pool, min(want, len(pool)))
    if len(chosen) < want:
        rest = [p for p in all_files if p not in gold_files and p not in chosen and (tree / p).is_file()]
        chosen += rng.sample(rest, min(want - len(chosen), len(rest)))
    return chosen


# ---------------------------------------------------------------- scoring

def score_pack(task: dict, items: list[dict], top: int = 5) -> dict:
    """Recall of the gold within the delivered pack (prequential: before any feedback).

    ``file_R``/``fn_R`` look at the whole pack (its budget); ``file_R@5``/``fn_R@5``
    and ``fn_MRR`` at the pack's order (rank), where feedback acts first.
    """
    items = sorted(items, key=lambda i: i["rank"])
    gold_files = list(dict.fromkeys(task["gold_files"]))
    gold_fns = list(dict.fromkeys(task["gold_functions"]))

    def found(subset: list[dict]) -> tuple[set[str], set[str], set[str]]:
        ids = {gold_form(i["entity_id"]) for i in subset}
        paths = {i["path"] for i in subset} | {file_of(x) for x in ids}
        return ids, paths, {i["path"] for i in subset if i["kind"] == "file"}

    metrics: dict[str, float | None] = {k: None for k in ("file_R", "fn_R", "fn_R_entity", f"file_R@{top}",
                                                           f"fn_R@{top}", "fn_MRR")}
    for suffix, subset in (("", items), (f"@{top}", items[:top])):
        ids, paths, file_entities = found(subset)
        if gold_files:
            metrics["file_R" + suffix] = sum(f in paths for f in gold_files) / len(gold_files)
        if gold_fns:
            metrics["fn_R" + suffix] = sum(g in ids or file_of(g) in file_entities for g in gold_fns) / len(gold_fns)
            if not suffix:
                metrics["fn_R_entity"] = sum(g in ids for g in gold_fns) / len(gold_fns)
    if gold_fns:
        metrics["fn_MRR"] = next((1 / n for n, i in enumerate(items, 1) if gold_form(i["entity_id"]) in gold_fns), 0.0)
    return metrics


def classify_hits(record: dict) -> dict[str, int]:
    """The prompt pack's hits by what the agent did there: gold function, other code of a gold file,
    a distractor file (read once, never edited), anything else."""
    gold_fns, gold_files = set(record["gold_functions"]), set(record["gold_files"])
    distractors = set(record["agent"]["distractors"])
    counts = {"gold_fn": 0, "gold_file": 0, "distractor": 0, "other": 0}
    for entity_id in record["outcomes"].get("prompt_hit_ids", []):
        path = file_of(entity_id)
        if gold_form(entity_id) in gold_fns:
            counts["gold_fn"] += 1
        elif path in gold_files:
            counts["gold_file"] += 1
        elif path in distractors:
            counts["distractor"] += 1
        else:
            counts["other"] += 1
    return counts


def summarise(records: list[dict]) -> dict:
    """Macro means (per cent) of recall and tokens, pooled hit rates, over ``records``."""
    def mean(key: str) -> float | None:
        values = [r["metrics"][key] for r in records if r["metrics"].get(key) is not None]
        return 100 * sum(values) / len(values) if values else None

    def pooled(event: str | None, field: str = "hit", total: str = "items") -> float | None:
        hits = items = 0
        for r in records:
            buckets = [r["outcomes"].get(event, {})] if event else \
                [v for k, v in r["outcomes"].items() if isinstance(v, dict) and k in ("prompt", "session_start")]
            for b in buckets:
                hits += b.get(field, 0)
                items += b.get(total, 0)
        return 100 * hits / items if items else None

    tokens = [r["pack"]["chars"] / 4 for r in records]
    kinds = {"gold_fn": 0, "gold_file": 0, "distractor": 0, "other": 0}
    for r in records:
        for k, v in r.get("hit_kinds", {}).items():
            kinds[k] += v
    hits = sum(kinds.values())
    return {
        "sessions": len(records),
        "file_R": mean("file_R"), "fn_R": mean("fn_R"), "fn_R_entity": mean("fn_R_entity"),
        "file_R@5": mean("file_R@5"), "fn_R@5": mean("fn_R@5"), "fn_MRR": mean("fn_MRR"),
        "hit_kinds": kinds, "distractor_hit_share": 100 * kinds["distractor"] / hits if hits else None,
        "n_file": sum(r["metrics"]["file_R"] is not None for r in records),
        "n_fn": sum(r["metrics"]["fn_R"] is not None for r in records),
        "hit_rate": pooled("prompt"), "hit_rate_full": pooled("prompt", "full_hit", "full_items"),
        "hit_rate_all": pooled(None),
        "pending": sum(b.get("pending", 0) for r in records for b in r["outcomes"].values() if isinstance(b, dict)),
        "tokens_per_pack": statistics.mean(tokens) if tokens else None,
        "empty_packs": sum(1 for r in records if not r["pack"]["items"]),
    }


# ---------------------------------------------------------------- one arm

def write_config(tree: Path, arm: str, mode: str, extra: list[str], rank: dict[str, str] | None = None) -> str:
    values = dict(ARMS[arm] if rank is None else rank)
    sections: dict[str, dict[str, str]] = {
        "retrieve": {"mode": json.dumps(mode)},
        "usage": {"trust_client_clock": "true"},
        "rank": {k: v for k, v in values.items() if k not in HISTORY_CANDIDATE_KEYS},
        "daemon": {"idle_exit_s": "0"},
        "hook": {"deadline_ms": str(HOOK_DEADLINE_MS)},
    }
    if mode == "bm25":  # no vectors read: keep the model and its CPU out of the run
        sections["embed"] = {"enabled": "false"}
    history = {k: v for k, v in values.items() if k in HISTORY_CANDIDATE_KEYS}
    if history:
        sections["history"] = history
    text = render_config(sections, extra)
    (tree / ".cogd").mkdir(parents=True, exist_ok=True)
    (tree / ".cogd" / "config.toml").write_text(text, encoding="utf-8")
    return text


def task_time(task: dict) -> float:
    return dt.datetime.fromisoformat(task["date"]).timestamp()


def history_enabled(daemon: Daemon) -> bool:
    """Whether the tree's daemon mines history (``[history] enabled`` and a git repository to mine)."""
    state = daemon.rpc("history.status", {}, timeout=30)
    return isinstance(state, dict) and bool(state.get("enabled")) and state.get("state") not in ("no_git",)


def run_arm(arm: str, tasks: list[dict], args, shared_cache: Path | None) -> dict:
    """Replay every task through one arm's daemon; returns its records (never raises)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"cogd-replay-{arm}-"))
    tree = ScratchTree(args.git_dir, scratch, as_repo=args.git_repo)
    transcripts = scratch / "transcripts"
    transcripts.mkdir()
    daemon = Daemon(tree.root)
    state_db = tree.root / ".cogd" / "state.db"
    index_db = tree.root / ".cogd" / "index" / "index.db"
    before = snapshot(args.git_dir)
    result: dict = {"arm": arm, "scratch": str(scratch), "records": [], "error": None, "clock_honoured": None}
    arm_started = time.perf_counter()
    hook_times: dict[str, list[float]] = {}
    started = False
    clock = 0.0
    try:
        t = time.perf_counter()
        tree.move(tasks[0]["parent"])
        result["config"] = write_config(tree.root, arm, args.mode, args.set, args.arm_ranks.get(arm))
        if shared_cache is not None and shared_cache.is_file():
            (tree.root / ".cogd" / "index").mkdir(parents=True, exist_ok=True)
            shutil.copy2(shared_cache, tree.root / ".cogd" / "index" / "embed_cache.db")
        started = True
        daemon.start()
        daemon.refresh()
        first = daemon.status()
        result["initial_index"] = {k: (first.get("index") or {}).get(k) for k in ("files", "entities", "edges")}
        result["initial_index_s"] = time.perf_counter() - t
        files: list[str] = []
        clock_checks = []
        for n, task in enumerate(tasks):
            timing: dict[str, float] = {}
            t = time.perf_counter()
            tree.move(task["parent"])
            timing["move"] = time.perf_counter() - t
            t = time.perf_counter()
            daemon.refresh()
            timing["refresh"] = time.perf_counter() - t
            # history on: the pack may use exactly the history reachable from the task's parent, so
            # wait until the miner has synchronised with it (else the pack silently has none)
            if history_enabled(daemon):
                timing["history_wait"], _ = daemon.wait_history(task["parent"])
            files = indexed_files(index_db)
            embedding = None
            if args.mode != "bm25":
                waited, embedding, timed_out = daemon.wait_embeddings(args.embed_timeout)
                timing["embed_wait"] = waited
                if timed_out:
                    print(f"  [{arm}] task {n}: embeddings not caught up after {waited:.0f} s", file=sys.stderr)
            record = replay_task(n, task, tree, transcripts, state_db, index_db, files, clock, hook_times, args)
            clock = record["clock_end"]
            clock_checks.append(record["clock_honoured"])
            record["embedding"] = ({k: embedding.get(k) for k in ("state", "coverage", "entities", "pending")}
                                   if isinstance(embedding, dict) else None)
            record["timing"].update(timing)
            result["records"].append(record)
            if (n + 1) % 10 == 0 or n + 1 == len(tasks):
                done = summarise(result["records"])
                print(f"  [{arm}] {n + 1}/{len(tasks)} sessions, {time.perf_counter() - arm_started:.0f} s; "
                      f"so far file R {fmt(done['file_R'])}, fn R {fmt(done['fn_R'])}, "
                      f"hit {fmt(done['hit_rate'])}%", file=sys.stderr)
        known = [c for c in clock_checks if c is not None]
        result["clock_honoured"] = (sum(known) / len(known)) if known else None
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 — reported; the other arms still run
        result["error"] = f"{exc.__class__.__name__}: {exc}"
        result["interrupted"] = isinstance(exc, KeyboardInterrupt)
        log = tree.root / ".cogd" / "logs" / "daemon.log"
        if log.exists():
            result["daemon_log_tail"] = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    finally:
        if started:
            try:
                daemon.stop()
            except Exception as exc:  # noqa: BLE001
                print(f"  [{arm}] cogd stop failed: {exc}", file=sys.stderr)
        hook_log = tree.root / ".cogd" / "logs" / "hook.log"
        if hook_log.exists():
            result["hook_log_tail"] = hook_log.read_text(encoding="utf-8", errors="replace").splitlines()[-10:]
        cache = tree.root / ".cogd" / "index" / "embed_cache.db"
        if args.share_cache and args.mode != "bm25" and cache.is_file() and not result["error"]:
            try:  # the daemon is stopped: its cache is checkpointed and safe to copy
                shutil.copy2(cache, args.cache_copy)
            except OSError:
                pass
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        result["git_dir_unchanged"] = snapshot(args.git_dir) == before
        result["wall_s"] = time.perf_counter() - arm_started
        result["hook_ms"] = {event: {"p50": 1000 * statistics.median(v), "p95": 1000 * pct(v, 0.95), "n": len(v)}
                             for event, v in hook_times.items() if v}
    return result


def replay_task(n: int, task: dict, tree: ScratchTree, transcripts: Path, state_db: Path, index_db: Path,
                files: list[str], clock: float, hook_times: dict, args) -> dict:
    """One session for one task; returns its record (prequential pack metrics, then outcomes)."""
    rng = random.Random(f"{args.seed}:{task['commit']}")
    session_id = str(uuid.uuid5(SESSION_NAMESPACE, f"{args.seed}:{n}:{task['commit']}"))
    t0 = max(task_time(task), clock + T_GAP)
    timings: dict[str, list[float]] = {}
    session = Session(tree.root, transcripts, session_id, t0, timings)
    session.start(t0)
    text = session.prompt(task["query"], t0 + T_PROMPT)
    # Prequential: the pack as delivered, read before the session's own tool uses.
    delivery = prompt_delivery(state_db, session_id)
    waited = 0.0
    while delivery is None and text.strip() and waited < args.outcome_wait * 5:
        # the daemon records a pack once the hook's acknowledgement reaches it, which on a loaded
        # machine can be after the hook has exited: without this wait the pack scored as empty
        time.sleep(0.05)
        waited += 0.05
        delivery = prompt_delivery(state_db, session_id)
    items = delivery["items"] if delivery else []
    metrics = score_pack(task, items)
    clock_honoured = None if delivery is None else abs(delivery["created_at"] - (t0 + T_PROMPT)) < 1.0
    gold_files = list(dict.fromkeys(f for f in task["gold_files"] if (tree.root / f).is_file()))
    spans = gold_spans(index_db, task["gold_functions"])
    distractors = pick_distractors(rng, [i["path"] for i in items], set(task["gold_files"]), files, tree.root)

    at = t0 + T_PROMPT
    agent: dict = {"grep": grep_word(task["query"]), "distractors": distractors, "reads": [], "edits": [],
                   "spans_found": len(spans), "spans_wanted": len(set(task["gold_functions"]))}
    at += T_STEP
    session.grep(agent["grep"], sorted(set(gold_files) | set(distractors)), at)
    for path in distractors:
        at += T_STEP
        agent["reads"].append(session.read(path, at))
    by_file: dict[str, list[tuple[int, int]]] = {}
    for gid, span in spans.items():
        by_file.setdefault(file_of(gid), []).append(span)
    for path in gold_files:
        at += T_STEP
        fn_spans = sorted(by_file.get(path, []))
        cover = (max(1, fn_spans[0][0] - 2), max(e for _, e in fn_spans) + 2) if fn_spans else None
        agent["reads"].append(session.read(path, at, cover))
    for path in gold_files:
        hunks = sorted(by_file.get(path, [])) or tree.old_hunks(task["parent"], task["commit"], path)[:5] or [None]
        for hunk in hunks:
            at += T_STEP
            agent["edits"].append(session.edit(path, hunk, at))
    at += T_END
    session.end(at)
    outcomes = session_outcomes(state_db, session_id)
    waited = 0.0
    while any(b.get("pending") for b in outcomes.values() if isinstance(b, dict)) and waited < args.outcome_wait:
        time.sleep(0.1)  # the daemon may resolve session-end misses asynchronously
        waited += 0.1
        outcomes = session_outcomes(state_db, session_id)
    for event, values in timings.items():
        hook_times.setdefault(event, []).extend(values)
    stdout_ids = pack_ids(text)
    record = {
        "n": n, "commit": task["commit"], "parent": task["parent"], "date": task["date"], "session_id": session_id,
        "query": task["query"][:300], "gold_files": task["gold_files"], "gold_functions": task["gold_functions"],
        "query_mentions_gold_file": task.get("query_mentions_gold_file"),
        "query_mentions_gold_function": task.get("query_mentions_gold_function"),
        "pack": {"chars": delivery["size_chars"] if delivery else len(text), "hook_chars": len(text),
                 "items": [{"id": i["entity_id"], "kind": i["kind"], "path": i["path"], "pointer": bool(i["pointer"]),
                            "lines": [i["start_line"], i["end_line"]]} for i in items]},
        "stdout_matches_ledger": stdout_ids == [i["entity_id"] for i in items],
        "metrics": metrics, "outcomes": outcomes, "agent": agent,
        "clock_start": t0, "clock_end": at, "clock_honoured": clock_honoured,
        "timing": {"hooks_s": sum(sum(v) for v in timings.values())},
    }
    record["hit_kinds"] = classify_hits(record)
    return record


# ---------------------------------------------------------------- report

def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else 0.0


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def gain(a: float | None, b: float | None) -> float | None:
    """Relative gain of ``a`` over ``b`` in per cent."""
    return None if a is None or b is None or b == 0 else 100 * (a - b) / b


def report(results: list[dict], block: int) -> tuple[str, dict]:
    out = ["", "Per block of sessions (prequential: each pack scored before its own session's feedback; "
           "recall in %, hit rate = hits / delivered items of the prompt packs, pooled; tokens = chars / 4)", "",
           "| arm | sessions | file R | fn R | fn R@5 | hit rate | tokens/pack |", "|---|---|---|---|---|---|---|"]
    summary: dict = {"blocks": {}, "second_half": {}}
    for res in results:
        recs = res["records"]
        summary["blocks"][res["arm"]] = []
        for i in range(0, len(recs), block):
            s = summarise(recs[i:i + block])
            s["first"], s["last"] = i + 1, i + len(recs[i:i + block])
            summary["blocks"][res["arm"]].append(s)
            out.append(f"| {res['arm']} | {s['first']}–{s['last']} | {fmt(s['file_R'])} | {fmt(s['fn_R'])} | "
                       f"{fmt(s['fn_R@5'])} | {fmt(s['hit_rate'])} | {fmt(s['tokens_per_pack'], 0)} |")
    out += ["", "Second half of the stream", "",
            "| arm | sessions | file R | fn R | fn R (entity) | file R@5 | fn R@5 | fn MRR | hit rate | "
            "hit rate (full items) | hit rate (all packs) | hits on distractors | tokens/pack | pending |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        recs = res["records"]
        s = summarise(recs[len(recs) // 2:])
        summary["second_half"][res["arm"]] = s
        out.append(f"| {res['arm']} | {s['sessions']} | {fmt(s['file_R'])} | {fmt(s['fn_R'])} | "
                   f"{fmt(s['fn_R_entity'])} | {fmt(s['file_R@5'])} | {fmt(s['fn_R@5'])} | {fmt(s['fn_MRR'])} | "
                   f"{fmt(s['hit_rate'])} | {fmt(s['hit_rate_full'])} | {fmt(s['hit_rate_all'])} | "
                   f"{fmt(s['distractor_hit_share'])}% | {fmt(s['tokens_per_pack'], 0)} | {s['pending']} |")
    half = summary["second_half"]
    out.append("")
    gains = {}
    for base in ("off", "recency"):
        if "on" in half and base in half:
            g = {k: gain(half["on"][k], half[base][k])
                 for k in ("file_R", "fn_R", "fn_R_entity", "fn_R@5", "fn_MRR", "hit_rate")}
            gains[f"on_vs_{base}"] = g
            out.append(f"on vs {base} (second half, relative): file R {fmt(g['file_R'])}%, "
                       f"fn R {fmt(g['fn_R'])}%, fn R entity {fmt(g['fn_R_entity'])}%, fn R@5 {fmt(g['fn_R@5'])}%, "
                       f"fn MRR {fmt(g['fn_MRR'])}%, hit rate {fmt(g['hit_rate'])}%")
    summary["gains"] = gains
    if "on" in half:
        hr = half["on"]["hit_rate"]
        goals = [f"goal hit rate >= 35% (on, second half): {'MET' if hr is not None and hr >= 35 else 'not met'} "
                 f"({fmt(hr)}%)"]
        if "on_vs_off" in gains:
            g = gains["on_vs_off"]["fn_R"]
            goals.append(f"goal on beats off by >= 10% relative fn R: {'MET' if g is not None and g >= 10 else 'not met'}"
                         f" ({fmt(g)}%)")
        if "on_vs_recency" in gains:
            g = gains["on_vs_recency"]["fn_R"]
            goals.append(f"goal on beats recency-only: {'MET' if g is not None and g > 0 else 'not met'} ({fmt(g)}%)")
        out += goals
    out.append("")
    by_arm = {r["arm"]: r for r in results}
    for res in results:
        recs = res["records"]
        if res["error"]:
            out.append(f"arm {res['arm']}: FAILED after {len(recs)} sessions: {res['error']}")
            out.extend(f"    daemon.log: {line}" for line in res.get("daemon_log_tail", [])[-5:])
        if not recs:
            continue
        cov = [r["embedding"]["coverage"] for r in recs if r.get("embedding") and r["embedding"].get("coverage") is not None]
        hooks = ", ".join(f"{e} p50 {v['p50']:.0f} ms" for e, v in res.get("hook_ms", {}).items())
        same = ""
        if res["arm"] != "off" and "off" in by_arm:
            base = {r["commit"]: [i["id"] for i in r["pack"]["items"]] for r in by_arm["off"]["records"]}
            eq = [base.get(r["commit"]) == [i["id"] for i in r["pack"]["items"]] for r in recs if r["commit"] in base]
            same = f"; packs identical to arm off: {sum(eq)}/{len(eq)}"
        out.append(
            f"arm {res['arm']}: {len(recs)} sessions in {res['wall_s']:.0f} s (initial index "
            f"{res.get('initial_index_s', 0):.0f} s, {res.get('initial_index')}); client clock honoured: "
            f"{fmt(None if res['clock_honoured'] is None else 100 * res['clock_honoured'], 0)}% of deliveries; "
            f"hook stdout = ledger items: {sum(r['stdout_matches_ledger'] for r in recs)}/{len(recs)}; "
            f"tool uses recorded: {sum(r['outcomes'].get('tool_uses', 0) for r in recs)}; "
            f"gold spans found {sum(r['agent']['spans_found'] for r in recs)}/"
            f"{sum(r['agent']['spans_wanted'] for r in recs)}"
            + (f"; embedding coverage at prompt time min {min(cov):.3f}" if cov else "")
            + f"; lost packs (printed, no delivery found): {sum(_replay_cv.lost(r) for r in recs)}"
            + f"; {hooks}; git dir unchanged: {res['git_dir_unchanged']}{same}")
    return "\n".join(out), summary


# ---------------------------------------------------------------- main

def select_tasks(rows: list[dict], last: int, offset: int, limit: int) -> list[dict]:
    tasks = rows[-last:] if last else rows
    tasks = tasks[offset:]
    return tasks[:limit] if limit else tasks


def parse_candidate(spec: str) -> tuple[str, dict[str, str]]:
    """``"utility_weight=0.5,evidence_k=10"`` → (arm name ``u0.5_k10``, ``[rank]`` values).

    The keys of :data:`HISTORY_CANDIDATE_KEYS` are returned among them and written to
    ``[history]`` instead (:func:`write_config`).

    Only :data:`CANDIDATE_KEYS` may be set (finite numbers ≥ 0, or for :data:`WORD_KEYS` one of
    their words, e.g. ``association_combine=max`` → ``acmax``); the rest of ``[rank]``
    is cogd's defaults. Raises ValueError on a bad spec.
    """
    rank: dict[str, str] = {}
    for part in (x.strip() for x in spec.split(",") if x.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in CANDIDATE_KEYS:
            raise ValueError(f"candidate {spec!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(CANDIDATE_KEYS)}")
        if key in WORD_KEYS:
            if value.strip() not in WORD_KEYS[key]:
                raise ValueError(f"candidate {spec!r}: {key} must be one of {', '.join(WORD_KEYS[key])}")
            rank[key] = json.dumps(value.strip())  # a TOML basic string
            continue
        number = float(value)
        if not (number >= 0 and number != float("inf")):
            raise ValueError(f"candidate {spec!r}: {key} must be a finite number >= 0")
        rank[key] = repr(number) if number != int(number) else str(int(number))
    if not rank:
        raise ValueError(f"candidate {spec!r} sets nothing")
    name = "_".join(f"{CANDIDATE_KEYS[k]}{v.strip(chr(34))}" for k, v in sorted(rank.items(), key=lambda kv: list(CANDIDATE_KEYS).index(kv[0])))
    return name, rank


def cv_section(results: list[dict], tasks: list[dict], recall: str = "fn_R") -> tuple[str, dict]:
    """The cross-validation tables (:mod:`_replay_cv`) over the arms that ran; needs arm ``off``.

    Arms pooled from several runs (:func:`load_results`) carry ``baseline``: the name of their
    run's off arm, against which they are chosen and judged. ``recall``: the per-session recall
    the folds are chosen and judged on, ``fn_R`` (a delivered file entity covers its functions)
    or ``fn_R_entity`` (the function's own entity only: a file entity placed as a heading
    delivers no function's code); the tables still call it fn R.
    """
    if recall not in ("fn_R", "fn_R_entity"):
        raise ValueError(f"recall must be fn_R or fn_R_entity, got {recall!r}")
    done = [r for r in results if r["records"] and not r["error"]]
    arms = {r["arm"]: ([dict(rec, metrics=dict(rec["metrics"], fn_R=rec["metrics"][recall])) for rec in r["records"]]
                       if recall != "fn_R" else r["records"]) for r in done}
    if "off" not in arms:
        return "cross-validation skipped: the off arm did not complete", {}
    baselines = {r["arm"]: arms[r.get("baseline", "off")] for r in done if r.get("baseline", "off") in arms}
    commits = {r["commit"] for r in arms["off"]}
    folds = {t["commit"]: int(t["fold"]) for t in tasks if t["commit"] in commits and t.get("fold") is not None}
    # ties go to off; the other runs' off arms are baselines only, not candidates
    ordered = {"off": arms["off"], **{k: v for k, v in arms.items() if k != "off" and not k.startswith("off@")}}
    out = ["", "## Cross-validation over the tasks' folds (prequential replay; choice on 4 folds, judged on the 5th)",
           f"candidates: {', '.join(ordered)}; recall: {recall}; objective: mean fn R + fn MRR minus the run's off, over the training "
           f"folds' sessions; noise: paired bootstrap ({_replay_cv.BOOTSTRAP_RESAMPLES} resamples) 95% interval of "
           "the mean Δ over the held-out fold's tasks — a fold loses when the whole interval is below 0", ""]
    summary = {}
    fixed_arms = ["on", "history", "full"]
    for rule in _replay_cv.RULES:
        chosen = _replay_cv.cross_validate(ordered, folds, baselines=baselines, rule=rule)
        out += _replay_cv.render(chosen, f"per-fold choice (rule {rule}) vs off")
        summary[f"chosen_{rule}"] = chosen
        fixed_arms.append(chosen["all_folds_choice"])
    for fixed in dict.fromkeys(fixed_arms):
        if fixed in ordered and fixed != "off" and fixed not in summary:
            summary[fixed] = _replay_cv.cross_validate(ordered, folds, fixed=fixed, baselines=baselines)
            out += _replay_cv.render(summary[fixed], f"arm {fixed} on every fold vs off")
    return "\n".join(out), summary


def load_results(paths: list[str]) -> tuple[list[dict], dict]:
    """Arms of earlier ``--out`` files and the first file's header.

    The first file naming an arm wins; the off arm of the n-th file (n ≥ 2) is renamed
    ``off@n`` and named as the ``baseline`` of that file's other arms.
    """
    results, seen, header = [], set(), {}
    for n, path in enumerate(paths, 1):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        header = header or data
        base = "off" if n == 1 else f"off@{n}"
        for arm in data.get("arms", []):
            arm = dict(arm, arm=base if arm["arm"] == "off" else arm["arm"], baseline=base)
            if arm["arm"] not in seen:
                seen.add(arm["arm"])
                results.append(arm)
    return results, header


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", default=str(DEFAULT_GIT_DIR) if DEFAULT_GIT_DIR.is_dir() else None,
                        help=f"a full-history git directory of pallets/click (default {DEFAULT_GIT_DIR})")
    parser.add_argument("--tasks", default=str(DEFAULT_TASKS))
    parser.add_argument("--last", type=int, default=150, help="the newest N tasks (0 = all; default 150)")
    parser.add_argument("--offset", type=int, default=0, help="skip the first N of the selected tasks")
    parser.add_argument("--limit", type=int, default=0, help="then keep only N tasks (0 = all)")
    parser.add_argument("--arms", default="off,on,recency")
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "bm25", "vector"),
                        help="[retrieve] mode; bm25 also disables embeddings (quick run)")
    parser.add_argument("--block", type=int, default=25, help="sessions per block in the table")
    parser.add_argument("--seed", type=int, default=0, help="seeds distractor choice and session ids")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="extra .cogd/config.toml values for every arm (repeatable)")
    parser.add_argument("--embed-timeout", type=float, default=900.0,
                        help="seconds to wait for the embedder to catch up before a prompt (the first ~2,400 "
                             "entities of click take 60-90 s on two cores)")
    parser.add_argument("--outcome-wait", type=float, default=2.0,
                        help="seconds to wait after SessionEnd for pending outcomes to resolve")
    parser.add_argument("--no-share-cache", dest="share_cache", action="store_false",
                        help="do not copy the first arm's embedding cache into the next arms")
    parser.add_argument("--no-git-repo", dest="git_repo", action="store_false",
                        help="make the scratch tree a plain directory (default: its own git repository borrowing "
                             "the objects through alternates, so cogd sees git history and recency)")
    parser.add_argument("--out", default=None, help="write per-session records and tables as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch trees (daemons are stopped anyway)")
    parser.add_argument("--candidate", action="append", default=[], metavar="KEY=V,KEY=V",
                        help="one more arm with these [rank] values ([history] for "
                             + ", ".join(HISTORY_CANDIDATE_KEYS) + "; keys: " + ", ".join(CANDIDATE_KEYS)
                             + "); repeatable. Its name is the short form, e.g. u0.5_a0.5_r0_k10")
    parser.add_argument("--cv", action="store_true",
                        help="cross-validate the choice among the arms over the tasks' fold field (0-4): choose on "
                             "four folds, judge against off on the fifth, per fold; needs arm off")
    parser.add_argument("--cv-recall", default="fn_R", choices=("fn_R", "fn_R_entity"),
                        help="the recall the cross-validation chooses and judges on: fn_R (a delivered file entity "
                             "covers its functions; default) or fn_R_entity (the function's own entity only)")
    parser.add_argument("--cv-from", action="append", default=[], metavar="OUT.json",
                        help="do not replay: report (with --cv) over the arms of earlier --out files (repeatable)")
    args = parser.parse_args(argv)
    args.arm_ranks = {}
    for spec in args.candidate:
        try:
            name, rank = parse_candidate(spec)
        except ValueError as exc:
            parser.error(str(exc))
        args.arm_ranks[name] = rank
    if args.cv_from:
        rows = [json.loads(line) for line in Path(args.tasks).read_text(encoding="utf-8").splitlines() if line.strip()]
        results, header = load_results(args.cv_from)
        text, summary = report(results, args.block)
        cv_text, cv_summary = cv_section(results, rows, args.cv_recall)
        print(text + "\n" + cv_text)
        if args.out:
            Path(args.out).write_text(json.dumps({"from": args.cv_from, "summary": summary, "cv": cv_summary,
                                                  "report": text + "\n" + cv_text}, indent=1, default=str),
                                      encoding="utf-8")
        return 0
    if not args.git_dir:
        parser.error("--git-dir is required (no default mirror found)")
    args.git_dir = Path(args.git_dir).resolve()
    if not (args.git_dir / "objects").is_dir():
        parser.error(f"{args.git_dir} is not a git directory (no objects/)")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    arms += [name for name in args.arm_ranks if name not in arms]
    unknown = [a for a in arms if a not in ARMS and a not in args.arm_ranks]
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    for tool in ("cogd", "cogd-hook"):
        if not (BIN / tool).exists():
            parser.error(f"{BIN / tool} not found: run with the interpreter of cogd's environment")
    rows = [json.loads(line) for line in Path(args.tasks).read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = select_tasks(rows, args.last, args.offset, args.limit)  # the file is oldest first: replay order
    if not tasks:
        parser.error("the selection holds no task")

    def on_term(signum, frame):  # noqa: ARG001 — let the finally blocks stop daemons and clean up
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    cache_dir = Path(tempfile.mkdtemp(prefix="cogd-replay-cache-"))
    args.cache_copy = cache_dir / "embed_cache.db"
    started = time.perf_counter()
    print(f"{len(tasks)} sessions ({tasks[0]['date'][:10]} … {tasks[-1]['date'][:10]}), arms {arms}, "
          f"mode {args.mode}", file=sys.stderr)
    results = []
    try:
        for arm in arms:
            print(f"arm {arm} …", file=sys.stderr)
            results.append(run_arm(arm, tasks, args, args.cache_copy if args.share_cache else None))
            if args.out:  # after every arm: a long sweep that dies keeps what ran
                Path(args.out + ".partial").write_text(json.dumps({"arms": results}, default=str), encoding="utf-8")
            if results[-1].get("interrupted"):
                print("interrupted: no further arms; reporting what ran", file=sys.stderr)
                break
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    text, summary = report(results, args.block)
    cv_summary = None
    if args.cv:
        cv_text, cv_summary = cv_section(results, tasks, args.cv_recall)
        text += "\n" + cv_text
    wall = time.perf_counter() - started
    text = (f"replay: {len(tasks)} sessions ({tasks[0]['commit'][:10]}..{tasks[-1]['commit'][:10]}), "
            f"mode {args.mode}, seed {args.seed}, wall {wall:.0f} s\n") + text
    print(text)
    if args.out:
        payload = {"tasks": args.tasks, "last": args.last, "offset": args.offset, "limit": args.limit,
                   "mode": args.mode, "seed": args.seed, "block": args.block, "sets": args.set, "wall_s": wall,
                   "summary": summary, "cv": cv_summary, "arms": results, "report": text}
        Path(args.out).write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return 1 if any(r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
