#!/usr/bin/env python3
"""Replay pallets/click's history through cogd and score the prompt packs.

What it measures
----------------
The localisation tasks of ``../shared/eval-data/commits/pallets__click.jsonl``
(see that directory's README, whose protocol this follows): for each task the
tree as it was before the change, the change's commit message as the prompt,
and the files and functions the change modified as the gold. For each *arm*
(a ``[retrieve] mode`` of cogd: ``bm25``, ``vector``, ``hybrid``) the script

1. makes a scratch work tree in a temporary directory and moves it through the
   selected tasks oldest first, with a private ``GIT_INDEX_FILE`` kept outside
   the tree: ``git --git-dir=D --work-tree=W read-tree -u --reset PARENT`` the
   first time, then ``read-tree -u -m PREVIOUS PARENT`` (only changed files are
   touched). ``git read-tree`` only reads objects from ``D``; the script checks
   that ``D`` is unchanged (names, sizes, mtimes) at the end of every arm;
2. writes ``W/.cogd/config.toml`` (``[retrieve] mode = ARM``, a pack big enough
   to list at least 20 ids, ``[daemon] idle_exit_s = 0``, a long hook deadline
   so a slow answer is measured instead of dropped), starts the tree's daemon
   (``cogd --root W start``) and, after every move, runs ``cogd --root W index``
   (returns when the index is current). For the vector and hybrid arms, when
   ``cogd status --json`` reports ``embedding.coverage``, it waits until that is
   1.0 with the embedder idle (``--embed-timeout``) and records the wait; the
   bm25 arm runs with ``[embed] enabled = false`` (the mode reads no vectors);
3. pipes a UserPromptSubmit payload (``tests/fixtures/hook-payloads/
   user_prompt_submit.json`` with ``cwd`` = W, ``prompt`` = the task's query, a
   fresh ``session_id``) through the real ``cogd-hook prompt-submit`` process
   and parses the ids of the pack in the order they appear (full items, then
   the one-line pointers). ``cogd --root W context QUERY --json`` is also run
   (a preview, not recorded) for the items' kinds and as a cross-check of the
   order and the block sizes (``--no-context`` skips it);
4. scores the pack.

The git subprocesses get ``GIT_INDEX_FILE``; cogd's processes get an
environment without any ``GIT_*`` variable, so cogd never sees ``D``. The
scratch tree is not a git repository: cogd lists its files with its own
gitignore-aware walk.

Scoring (the data README's, made precise)
-----------------------------------------
* Ranked file list: the order in which files first appear among the pack's
  ids (an id's file is its part before ``::``; a file entity's id is its path).
* Ranked function list: the pack's ids of kind ``function``/``method``, in pack
  order (kinds from ``cogd context --json``; without it, from the item heading,
  and a pointer of unknown kind with ``::`` counts as a function). The row
  ``fn ... (slots)`` instead ranks every id, so a file or class item takes a slot.
* cogd names a repeated definition of one qualified name ``name~2``; the gold
  has plain names, so ``~N`` is dropped before matching (first occurrence kept).
* recall@k = share of the gold found in the first k; Acc@k = 1 when all of the
  gold is in the first k; MRR = 1 / rank of the first gold item (0 if none).
* Tokens = characters / 4. An id is *delivered within B tokens* when the end of
  its rendered block in the hook's pack text (header included, i.e. the
  cumulative size of the pack up to and including that item) is at most 4·B
  characters. A gold file counts as delivered when any delivered id lies in it;
  a gold function when its own entity or its file's entity (id = path) was
  delivered (``fn in B tok (entity only)`` drops the file-entity rule). cogd
  caps a pack at 9,500 characters (~2,375 tokens), so budgets above that see
  the whole pack.
* Macro-average over tasks, in per cent. File metrics are split by
  ``query_mentions_gold_file`` and function metrics (over tasks that have gold
  functions) by ``query_mentions_gold_function``.

Issue-style prompts (SWE-bench instances)
-----------------------------------------
``--tasks`` may name ``../shared/eval-data/swebench_dev.jsonl`` (rows with ``base_commit``):
then each repository's instances are replayed in their own scratch tree and daemon, sorted by
``base_commit_date`` (``--repos A,B`` picks repositories and their order), each ``--git-dir``
given as ``OWNER/NAME=PATH``. A task's ``parent`` is its base commit; ``query_mentions_gold_file``
means the statement spells a gold path or file name, ``…_function`` a gold function's own
name. A mirror may lack a few large blobs: the move then writes the tree from ``ls-tree`` and
``cat-file`` without them (recorded per commit in the JSON as ``missing_blobs``). The report
adds one table per arm with a row per repository and in total, beside the data README's BM25
reference: file Acc@1/@5, file R@5, file MRR, function Acc@10, function MRR, function recall
within 2,000 and 8,000 tokens.

``--variants 'name:section.key=value,…;name2:…'`` (bm25 and hybrid arms): after the hook, each task's pack
is also built in this process (cogd imported; the index read-only; no ledger feedback) under
each variant's settings and scored alike, so parts of the ranking are compared on one replay
(the same scoring: with every setting at its default the variant equals the hook's pack). A
variant may set ``retrieve.mode`` (``bm25`` on the hybrid arm's index: the lexical arm's pack).
For the commit set the report ends with one row per variant, its per-fold deltas against the
default and a cross-validation of the choice over the tasks' ``fold`` (:func:`variant_cv`).

Saved indexes and caches
------------------------
``--save-index DIR`` keeps a copy of each task's ``index.db`` (SQLite's online
backup) as ``DIR/COMMIT.db``; ``--from-index DIR`` then scores the same tasks without a daemon or
a hook: the tree is still moved (the packs quote it), and the default configuration's pack and
each ``--variants`` pack are built in process on the saved index (the record is the default
pack, so it equals the hook's when nothing changed), turning an hour of replay into minutes
while a ranking is tuned. With ``--history on`` the save also keeps each task's ``history.db``
(``DIR/COMMIT.history.db``, its live set synchronised with the task's parent), and ``--from-index
DIR --history on`` moves a git scratch tree to each parent and reads history from those copies,
so the in-process packs equal the hook's with history on too. On the hybrid arm ``--from-index``
needs the ``--embed-cache DIR`` of the saving run: each saved index's entity vectors are looked up
there and the prompt is encoded in process (:class:`HybridVectors`; the packs then equal the
hook's). ``--signals`` keeps each item's ranking signals in ``--out``. ``--embed-cache DIR`` keeps each arm's embedding cache between runs
(copied into the scratch tree before its daemon starts, back after it stops): the cache is
keyed by content, so within a run it already spans every base commit, and across runs only
texts the earlier run never saw are embedded.

How to run
----------
    python scripts/eval_retrieval.py --git-dir /path/to/click.git [--arms bm25] [--limit 10]
    python scripts/eval_retrieval.py --tasks ../shared/eval-data/swebench_dev.jsonl --arms bm25 \
        --git-dir sphinx-doc/sphinx=S --git-dir astropy/astropy=A --git-dir pylint-dev/pylint=P \
        [--variants 'base:retrieve.idf_terms=false;…'] [--repos pylint-dev/pylint]

Options: ``--tasks PATH`` (default ``../shared/eval-data/commits/pallets__click.jsonl``
from the project root), ``--last 150`` (the newest N tasks: the rows of the
README's BM25 reference), ``--limit N`` (only the first N of those), ``--arms
bm25,vector,hybrid``, ``--budgets 2000,4000,8000``, ``--out results.json``,
``--set section.key=value`` (extra ``config.toml`` values, repeatable),
``--embed-timeout 600``, ``--no-context``, ``--keep`` (keep the scratch trees;
daemons are still stopped), ``--cogd-src DIR`` (put DIR first on cogd's
``PYTHONPATH``: an exported older ``cogd/`` to compare against, e.g. from
``git archive COMMIT cogd | tar -x -C DIR``). Run it with the interpreter of
cogd's environment. Standard library only; cogd through its console scripts
next to ``sys.executable``. Exit status 1 when an arm failed. Results are
macro-averages over ~150 tasks: a difference of a point or two is noise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _replay_tree import ScratchTree, snapshot, wait_embeddings as wait_for_embedder  # noqa: E402 — scripts/ is on sys.path when run as a script

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_TASKS = PROJECT.parent / "shared" / "eval-data" / "commits" / "pallets__click.jsonl"
PAYLOAD_FIXTURE = PROJECT / "tests" / "fixtures" / "hook-payloads" / "user_prompt_submit.json"
BIN = Path(sys.executable).parent  # not resolved: the venv's bin/ holds the console scripts
KS = (1, 5, 10, 20)
FUNCTION_KINDS = {"function", "method"}
HOOK_DEADLINE_MS = 60_000  # the eval's hook deadline; the shipped one is 1,500 ms
SHIPPED_DEADLINE_MS = 1_500

# The README's "plain BM25" reference on the newest 150 tasks.
REFERENCE = {
    "file R@1": 37.4, "file R@5": 80.9, "file R@10": 91.6, "file R@20": 96.1, "file MRR": 63.4,
    "fn R@1": 16.8, "fn R@5": 44.7, "fn R@10": 56.6, "fn R@20": 68.2, "fn MRR": 40.0,
    "file in 2000 tok": 81.7, "fn in 2000 tok": 51.9,
    "file in 4000 tok": 86.4, "fn in 4000 tok": 63.5,
    "file in 8000 tok": 89.6, "fn in 8000 tok": 70.2,
}
GOALS = {"fn in 2000 tok": 65.0, "file R@5": 88.0}


class EvalError(RuntimeError):
    pass


# ---------------------------------------------------------------- processes

COGD_SRC: str | None = None  # --cogd-src: a directory put first on cogd's PYTHONPATH


def clean_env() -> dict[str, str]:
    """The environment for cogd's processes: no GIT_* variable may point cogd at the git dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if COGD_SRC:
        env["PYTHONPATH"] = COGD_SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def cogd_source() -> dict:
    """Which cogd code ran: the project's commit and its uncommitted files (the code may be mid-edit)."""
    where = Path(COGD_SRC) if COGD_SRC else PROJECT
    info: dict = {"path": str(where)}
    try:
        head = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30, env=clean_env())
        info["project_head"] = head.stdout.strip()
        if not COGD_SRC:
            porcelain = subprocess.run(["git", "-C", str(PROJECT), "status", "--porcelain", "--", "cogd"],
                                       capture_output=True, text=True, timeout=30, env=clean_env())
            info["uncommitted"] = [line[3:] for line in porcelain.stdout.splitlines()]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def run(cmd: list[str], *, env: dict | None = None, input: str | None = None, timeout: float = 600,
        check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, env=env if env is not None else clean_env(),
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise EvalError(f"{' '.join(cmd[:4])} … exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def git(git_dir: Path, work: Path, index_file: Path, *args: str) -> None:
    env = clean_env()
    env["GIT_INDEX_FILE"] = str(index_file)
    run(["git", f"--git-dir={git_dir}", f"--work-tree={work}", *args], env=env, timeout=300)




def move_tree(git_dir: Path, work: Path, index_file: Path, previous: str | None, commit: str, result: dict) -> None:
    """Move the scratch tree to ``commit``: ``read-tree -u`` (``--reset`` the first time, ``-m
    PREVIOUS COMMIT`` after). A mirror may lack some large blobs; then the tree is written from
    ``ls-tree`` and ``cat-file`` without them (files of other commits removed) and the missing
    paths are recorded in ``result["missing_blobs"]`` — they are absent from the index, as in
    a partial clone."""
    try:
        if previous is None:
            git(git_dir, work, index_file, "read-tree", "-u", "--reset", commit)
        else:
            git(git_dir, work, index_file, "read-tree", "-u", "-m", previous, commit)
        return
    except EvalError as exc:
        if "unable to read" not in str(exc) and "not uptodate" not in str(exc) and "does not exist" not in str(exc):
            raise
    env = clean_env()
    env["GIT_INDEX_FILE"] = str(index_file)
    base = ["git", f"--git-dir={git_dir}"]
    listing = run([*base, "ls-tree", "-r", "-z", "--full-tree", commit], env=env, timeout=300).stdout
    entries = []
    for record in filter(None, listing.split("\0")):
        meta, path = record.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):
            entries.append((sha, path))
    check = run([*base, "cat-file", "--batch-check"], env=env, input="".join(f"{sha}\n" for sha, _ in entries),
                timeout=300).stdout.splitlines()
    missing = {entries[i][1] for i, line in enumerate(check) if line.endswith(" missing")}
    wanted = {path for _, path in entries if path not in missing}
    for existing in list(work.rglob("*")):
        rel = existing.relative_to(work).as_posix()
        if rel.split("/", 1)[0] == ".cogd" or existing.is_dir():
            continue
        if rel not in wanted:
            existing.unlink()
    for sha, path in entries:
        if path in missing:
            continue
        target = work / path
        data = subprocess.run([*base, "cat-file", "blob", sha], capture_output=True, env=env, timeout=300,
                              check=True).stdout
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    git(git_dir, work, index_file, "read-tree", "--reset", commit)  # the index only: later moves diff from here
    result.setdefault("missing_blobs", {})[commit] = sorted(missing)


# ---------------------------------------------------------------- pack parsing

_ITEM_HEAD = re.compile(r"^(\d+)\. `([^`]*):(\d+)-(\d+)` (.*?)\*\*(.*)\*\*\s*$")
_ITEM_ID = re.compile(r"^   id: `(.+)`\s*$")
_POINTER = re.compile(r"^- `(.+)` \(([^()]*):(\d+)-(\d+)\)\s*$")


def parse_pack(text: str) -> list[dict]:
    """The pack's ids in order: ``{"id", "kind", "pointer", "start", "end"}``.

    ``start``/``end`` are character offsets of the item's rendered block in
    ``text`` (a full item runs from its numbered heading to the next item, the
    pointer section or the end; a pointer is its line). Lines inside code
    fences are skipped.
    """
    items: list[dict] = []
    offset = 0
    in_fence = False
    current: dict | None = None
    for line in text.splitlines(keepends=True):
        start = offset
        offset += len(line)
        bare = line.rstrip("\n")
        if bare.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        head = _ITEM_HEAD.match(bare)
        if head:
            if current is not None:
                current["end"] = start
            words = head.group(5).split()
            current = {"id": None, "kind": words[-1] if words else "?", "pointer": False, "start": start, "end": None}
            items.append(current)
            continue
        ident = _ITEM_ID.match(bare)
        if ident and current is not None and current["id"] is None:
            current["id"] = ident.group(1)
            continue
        pointer = _POINTER.match(bare)
        if pointer:
            if current is not None:
                current["end"] = start
                current = None
            items.append({"id": pointer.group(1), "kind": "?", "pointer": True, "start": start, "end": offset})
            continue
        if bare.startswith("Also relevant") and current is not None:
            current["end"] = start - 1 if text[start - 1:start] == "\n" else start  # the blank line before
            current = None
    if current is not None:
        current["end"] = len(text)
    return [i for i in items if i["id"]]


def file_of(entity_id: str) -> str:
    return entity_id.split("::", 1)[0]


# ---------------------------------------------------------------- scoring

def rank_metrics(ranked: list[str], gold: list[str], prefix: str) -> dict[str, float]:
    gold_set = set(gold)
    out: dict[str, float] = {}
    for k in KS:
        top = set(ranked[:k])
        found = len(gold_set & top)
        out[f"{prefix} R@{k}"] = found / len(gold_set)
    for k in KS:
        out[f"{prefix} Acc@{k}"] = float(gold_set <= set(ranked[:k]))
    rr = 0.0
    for i, item in enumerate(ranked, 1):
        if item in gold_set:
            rr = 1.0 / i
            break
    out[f"{prefix} MRR"] = rr
    return out


_TWIN = re.compile(r"~\d+$")


def gold_form(entity_id: str) -> str:
    """An id as the gold spells it: cogd marks a repeated definition of one name ``name~2``
    (e.g. the other branch of ``if WIN: def f ... else: def f``); the gold has one ``name``."""
    return _TWIN.sub("", entity_id)


def score_task(task: dict, items: list[dict], budgets: list[int]) -> dict:
    items = [{**i, "id": gold_form(i["id"])} for i in items]
    seen: set[str] = set()
    items = [i for i in items if not (i["id"] in seen or seen.add(i["id"]))]  # first occurrence of a twin
    ids = [i["id"] for i in items]
    files: list[str] = []
    for entity_id in ids:
        path = file_of(entity_id)
        if path not in files:
            files.append(path)
    functions = [i["id"] for i in items
                 if i["kind"] in FUNCTION_KINDS or (i["kind"] == "?" and "::" in i["id"])]
    metrics: dict[str, float] = {}
    gold_files = list(dict.fromkeys(task["gold_files"]))
    gold_fns = list(dict.fromkeys(task["gold_functions"]))
    if gold_files:
        metrics.update(rank_metrics(files, gold_files, "file"))
    if gold_fns:
        metrics.update(rank_metrics(functions, gold_fns, "fn"))
        slots = rank_metrics(ids, gold_fns, "fn")
        for k in KS:
            metrics[f"fn R@{k} (slots)"] = slots[f"fn R@{k}"]
        metrics["fn MRR (slots)"] = slots["fn MRR"]
    for budget in budgets:
        delivered = {i["id"] for i in items if i["end"] <= budget * 4}
        delivered_files = {file_of(d) for d in delivered}
        if gold_files:
            metrics[f"file in {budget} tok"] = sum(f in delivered_files for f in gold_files) / len(gold_files)
        if gold_fns:
            metrics[f"fn in {budget} tok"] = sum(g in delivered or file_of(g) in delivered for g in gold_fns) / len(gold_fns)
            metrics[f"fn in {budget} tok (entity only)"] = sum(g in delivered for g in gold_fns) / len(gold_fns)
    return metrics


def metric_names(budgets: list[int]) -> list[str]:
    names = [f"file R@{k}" for k in KS] + [f"file Acc@{k}" for k in KS] + ["file MRR"]
    names += [f"file in {b} tok" for b in budgets]
    names += [f"fn R@{k}" for k in KS] + [f"fn Acc@{k}" for k in KS] + ["fn MRR"]
    names += [f"fn in {b} tok" for b in budgets]
    names += [f"fn in {b} tok (entity only)" for b in budgets]
    names += [f"fn R@{k} (slots)" for k in KS] + ["fn MRR (slots)"]
    return names


def aggregate(records: list[dict], budgets: list[int]) -> dict[str, dict[str, tuple[float | None, int]]]:
    """metric → column → (macro mean in %, n tasks)."""
    table: dict[str, dict[str, tuple[float | None, int]]] = {}
    for name in metric_names(budgets):
        flag = "query_mentions_gold_file" if name.startswith("file") else "query_mentions_gold_function"
        columns = {"all": [], "mentions": [], "no-mention": []}
        for rec in records:
            value = rec["metrics"].get(name)
            if value is None:
                continue
            columns["all"].append(value)
            columns["mentions" if rec[flag] else "no-mention"].append(value)
        table[name] = {col: ((100 * sum(v) / len(v)) if v else None, len(v)) for col, v in columns.items()}
    return table


def format_table(arm: str, table: dict, budgets: list[int]) -> str:
    def cell(value):
        return "    -" if value is None else f"{value:5.1f}"

    any_row = table["file R@1"]
    fn_row = table["fn R@1"]
    lines = [
        f"arm {arm}: file metrics over {any_row['all'][1]} tasks "
        f"(query names a gold file: {any_row['mentions'][1]}, not: {any_row['no-mention'][1]}); "
        f"function metrics over {fn_row['all'][1]} tasks with gold functions "
        f"(query names a gold function: {fn_row['mentions'][1]}, not: {fn_row['no-mention'][1]})",
        f"{'metric':<30} {'all':>6} {'mentions':>9} {'no-mention':>11} {'ref':>6}",
    ]
    for name in metric_names(budgets):
        row = table[name]
        ref = REFERENCE.get(name)
        lines.append(f"{name:<30} {cell(row['all'][0]):>6} {cell(row['mentions'][0]):>9} "
                     f"{cell(row['no-mention'][0]):>11} {'' if ref is None else f'{ref:5.1f}':>6}")
    return "\n".join(lines)


def goal_lines(arm: str, table: dict, baseline: dict | None) -> list[str]:
    out = []
    for name, goal in GOALS.items():
        row = table[name]
        allv, nom = row["all"][0], row["no-mention"][0]
        ref = REFERENCE[name]
        verdict = "MET" if allv is not None and allv >= goal else "not met"
        text = (f"  goal {name} >= {goal:.0f}: {verdict} (all {allv:.1f}, no-mention {nom:.1f}; "
                f"README BM25 reference {ref:.1f}: all {allv - ref:+.1f})")
        if baseline is not None:
            b = baseline[name]
            text += f"; vs this run's bm25 arm: all {allv - b['all'][0]:+.1f}, no-mention {nom - b['no-mention'][0]:+.1f}"
        out.append(text)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


# ---------------------------------------------------------------- one arm

def toml_value(text: str) -> str:
    """A --set value as TOML: numbers and booleans bare, anything else quoted."""
    if re.fullmatch(r"-?\d+(\.\d+)?|true|false", text):
        return text
    return json.dumps(text)


def write_config(work: Path, arm: str, extra: list[str]) -> str:
    sections: dict[str, dict[str, str]] = {
        "retrieve": {"mode": json.dumps(arm)},
        "pack": {"max_chars": "9500", "max_items": "20", "max_pointers": "40"},
        "daemon": {"idle_exit_s": "0"},
        "hook": {"deadline_ms": str(HOOK_DEADLINE_MS)},
    }
    if arm == "bm25":  # the mode uses no vectors: keep the model (and its CPU) out of the run
        sections["embed"] = {"enabled": "false"}
    for item in extra:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if not (section and name and _):
            raise EvalError(f"--set wants section.key=value, got {item!r}")
        sections.setdefault(section, {})[name] = toml_value(value)
    text = "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) + "\n" for s, kv in sections.items())
    (work / ".cogd").mkdir(parents=True, exist_ok=True)
    (work / ".cogd" / "config.toml").write_text(text, encoding="utf-8")
    return text


def cogd(work: Path, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    return run([str(BIN / "cogd"), "--root", str(work), *args], timeout=timeout, check=check)


def status(work: Path) -> dict:
    return json.loads(cogd(work, "status", "--json", timeout=60).stdout)


def wait_embeddings(work: Path, timeout: float) -> tuple[float, dict | None, bool]:
    """The embedder caught up in ``work``'s daemon: see :func:`_replay_tree.wait_embeddings`."""
    return wait_for_embedder(lambda: status(work), timeout, 0.25)


def wait_history(work: Path, head: str, timeout: float = 1800.0) -> tuple[float, dict]:
    """Wait until the tree's history miner has synchronised with ``head`` and mined all it may:
    ``(seconds waited, last history.status)``. Raises EvalError on timeout or a failed miner."""
    started = time.perf_counter()
    while True:
        state = json.loads(cogd(work, "history", "--json", timeout=60).stdout)
        if state.get("error"):
            raise EvalError(f"history mining failed: {state['error']}")
        if state.get("usable") and state.get("synced_head") == head and state.get("state") == "idle" \
                and not (state.get("last_pass") or {}).get("more"):
            return time.perf_counter() - started, {k: state.get(k) for k in ("mined", "skipped", "pairs", "seconds")}
        if time.perf_counter() - started > timeout:
            raise EvalError(f"history not synchronised with {head[:10]} after {timeout:.0f} s: {state}")
        time.sleep(0.2)


def normalised(message: str) -> str:
    return " ".join(message.lower().split())


def mark_duplicates(git_dir: Path, tasks: list[dict]) -> int:
    """Set each task's ``duplicate_messages``: the commits reachable from its parent whose message
    is the task's query (case and spacing aside) — what the masked-duplicate check is about.
    Returns how many tasks have one."""
    env = clean_env()
    log = run(["git", f"--git-dir={git_dir}", "log", "--all", "--format=%H%x00%B%x1e"], env=env, timeout=300).stdout
    by_message: dict[str, list[str]] = {}
    for record in log.split("\x1e"):
        commit, _, body = record.strip("\n").partition("\x00")
        if commit:
            by_message.setdefault(normalised(body), []).append(commit.strip())
    count = 0
    for task in tasks:
        found = []
        for commit in by_message.get(normalised(task["query"]), []):
            if commit == task["commit"]:
                continue
            probe = subprocess.run(["git", f"--git-dir={git_dir}", "merge-base", "--is-ancestor", commit, task["parent"]],
                                   env=env, capture_output=True, timeout=60)
            if probe.returncode == 0:
                found.append(commit)
        task["duplicate_messages"] = found
        count += bool(found)
    return count


def block_table(results: list[dict], size: int = 25) -> str:
    """Per block of ``size`` tasks (replay order), each arm's file R@5, file MRR, fn in 2000 tok,
    fn R@5 and fn MRR: whether a gain grows with the history behind it."""
    names = ("file R@5", "file MRR", "fn in 2000 tok", "fn R@5", "fn MRR")
    lines = ["", f"per block of {size} tasks (macro %, all tasks of the block):",
             f"{'arm':<26} {'block':>9} " + " ".join(f"{n:>15}" for n in names)]
    for res in results:
        recs = res["records"]
        for start in range(0, len(recs), size):
            block = recs[start:start + size]
            cells = []
            for name in names:
                values = [r["metrics"][name] for r in block if name in r["metrics"]]
                cells.append(f"{100 * sum(values) / len(values):15.1f}" if values else f"{'-':>15}")
            lines.append(f"{res['arm']:<26} {f'{start + 1}-{start + len(block)}':>9} " + " ".join(cells))
    return "\n".join(lines)


def duplicate_lines(results: list[dict]) -> list[str]:
    """The masked-duplicate check: tasks whose query is an earlier reachable commit's message,
    and, per arm, whether a gold item of theirs was credited to that very commit (its short
    hash among the item's ``history_commits``)."""
    out = []
    for res in results:
        dups = [r for r in res["records"] if r.get("duplicate_messages")]
        credited = 0
        for rec in dups:
            shorts = {c[:10] for c in rec["duplicate_messages"]}
            gold = set(rec["gold_files"]) | set(rec["gold_functions"])
            for item in rec["items"]:
                labels = (item.get("signals") or {}).get("history_commits") or []
                if (item["id"] in gold or file_of(item["id"]) in gold) and any(str(x)[:10] in shorts for x in labels):
                    credited += 1
                    break
        out.append(f"duplicate messages {res['arm']}: {len(dups)} tasks quote an earlier reachable commit's message; "
                   f"{credited} had a gold item credited to that commit")
    return out


def hook_payload(work: Path, prompt: str) -> str:
    payload = json.loads(PAYLOAD_FIXTURE.read_text(encoding="utf-8"))
    session = str(uuid.uuid4())
    payload["session_id"] = session
    payload["transcript_path"] = str(work.parent / f"{session}.jsonl")
    payload["cwd"] = str(work)
    payload["prompt"] = prompt
    return json.dumps(payload)


def run_arm(arm: str, tasks: list[dict], args, budgets: list[int], git_dir: Path, label: str | None = None,
            history: str | None = None) -> dict:
    """Replay ``tasks`` (oldest first) in one scratch tree moved through ``git_dir``; one daemon.

    ``label`` names the result (``arm`` by default; ``arm @ owner/name`` for one repository of
    a SWE-bench file). With ``--variants``, every task's index is also scored in this process
    under each variant's configuration (:func:`variant_packs`). ``history`` (``on``/``off``,
    ``--history``): the tree is a git repository of its own whose detached HEAD is each task's
    parent (:class:`_replay_tree.ScratchTree`: objects borrowed through ``alternates``), so
    the daemon mines exactly the history reachable from the parent (``[history] enabled``
    set accordingly); with ``on`` each task waits until the miner has synchronised with it.
    """
    scratch = Path(tempfile.mkdtemp(prefix=f"cogd-eval-{arm}-"))
    git_dir = Path(git_dir).resolve()
    tree = ScratchTree(git_dir, scratch, as_repo=True) if history else None
    work = tree.root if tree else scratch / "tree"
    work.mkdir(exist_ok=True)
    index_file = scratch / "git-index"  # outside the tree, so never indexed
    before = snapshot(git_dir)
    result: dict = {"arm": label or arm, "mode": arm, "scratch": str(scratch), "records": [], "error": None,
                    "variants": {name: [] for name, _ in VARIANTS}, "history": history}
    extra = list(args.set) + ([f"history.enabled={'true' if history == 'on' else 'false'}"] if history else [])
    started_daemon = False
    arm_started = time.perf_counter()
    hook_env = clean_env()
    hook_env["COGD_HOOK_DEADLINE_MS"] = str(HOOK_DEADLINE_MS)
    try:
        t0 = time.perf_counter()
        if tree:
            tree.move(tasks[0]["parent"])
        else:
            move_tree(git_dir, work, index_file, None, tasks[0]["parent"], result)
        result["config"] = write_config(work, arm, extra)
        if args.from_index:
            if history == "on" and not (Path(args.from_index) / f"{tasks[0]['commit']}.history.db").exists():
                raise EvalError("--from-index --history on needs the history.db copies a --save-index run "
                                "with --history on kept")
            return _replay_cached(arm, tasks, args, budgets, git_dir, work, index_file, result, arm_started, label,
                                  tree)
        kept_cache = embed_cache_file(args, label or arm)
        if kept_cache is not None and kept_cache.exists():
            from cogd.paths import Layout
            Layout(work).index_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kept_cache, Layout(work).index_dir / "embed_cache.db")
        started_daemon = True  # from here on, always try to stop it
        proc = cogd(work, "start", timeout=120, check=False)
        if proc.returncode != 0:
            raise EvalError(f"cogd start refused the arm: {(proc.stderr or proc.stdout).strip()[-600:]}")
        cogd(work, "index", timeout=1800)
        first = status(work)
        result["initial_status"] = {k: first.get(k) for k in ("version", "embedding", "retrieve")}
        result["initial_index"] = {k: first["index"].get(k) for k in ("files", "entities", "edges")}
        result["initial_index_s"] = time.perf_counter() - t0
        previous = tasks[0]["parent"]
        wants_embeddings = arm != "bm25"
        for n, task in enumerate(tasks):
            timing: dict[str, float] = {}
            t_task = time.perf_counter()
            if n:
                t = time.perf_counter()
                if tree:
                    tree.move(task["parent"])
                elif task["parent"] != previous:
                    move_tree(git_dir, work, index_file, previous, task["parent"], result)
                previous = task["parent"]
                timing["move"] = time.perf_counter() - t
                t = time.perf_counter()
                cogd(work, "index", timeout=1800)
                timing["index"] = time.perf_counter() - t
            if history == "on":
                timing["history_wait"], result["history_status"] = wait_history(work, task["parent"])
            if args.save_index:
                save_index(work, Path(args.save_index), task["commit"])
            embedding = None
            if wants_embeddings:
                waited, embedding, timed_out = wait_embeddings(work, args.embed_timeout)
                timing["embed_wait"] = waited
                if timed_out:
                    print(f"  [{arm}] task {n}: embeddings not caught up after {waited:.0f} s: {embedding}",
                          file=sys.stderr)
            t = time.perf_counter()
            hook = run([str(BIN / "cogd-hook"), "prompt-submit"], env=hook_env,
                       input=hook_payload(work, task["query"]), timeout=HOOK_DEADLINE_MS / 1000 + 30, check=False)
            timing["hook"] = time.perf_counter() - t
            text = ""
            if hook.stdout.strip():
                out = json.loads(hook.stdout)
                text = out["hookSpecificOutput"]["additionalContext"]
            items = parse_pack(text)
            check = None
            if not args.no_context:
                t = time.perf_counter()
                ctx = json.loads(cogd(work, "context", task["query"], "--json", timeout=300).stdout)
                timing["context"] = time.perf_counter() - t
                ctx_items = ctx.get("items", [])
                same_ids = [i["entity_id"] for i in ctx_items] == [i["id"] for i in items]
                chars_ok = same_ids and all(c["chars"] == i["end"] - i["start"] for c, i in zip(ctx_items, items))
                check = {"same_ids": same_ids, "same_text": ctx.get("text") == text, "chars_match": chars_ok}
                if same_ids:
                    for c, i in zip(ctx_items, items):
                        i["kind"] = c["kind"]
                        i["signals"] = c.get("signals")
            timing["total"] = time.perf_counter() - t_task
            for name, packed in variant_packs(work, arm, task["query"], cached_index(args, task)):
                result["variants"][name].append({
                    "commit": task["commit"], "fold": task.get("fold"),
                    "query_mentions_gold_file": task["query_mentions_gold_file"],
                    "query_mentions_gold_function": task["query_mentions_gold_function"],
                    "items": [{"id": i["id"], "kind": i["kind"], "end": i["end"]} for i in packed],
                    "metrics": score_task(task, packed, budgets)})
            record = {
                "commit": task["commit"], "parent": task["parent"], "date": task["date"], "fold": task.get("fold"),
                "query": task["query"][:300],
                "gold_files": task["gold_files"], "gold_functions": task["gold_functions"],
                "query_mentions_gold_file": task["query_mentions_gold_file"],
                "query_mentions_gold_function": task["query_mentions_gold_function"],
                "pack_chars": len(text), "hook_exit": hook.returncode,
                "items": [{"id": i["id"], "kind": i["kind"], "pointer": i["pointer"], "end": i["end"],
                           **({"signals": i["signals"]} if i.get("signals") else {})} for i in items],
                "check": check, "embedding": embedding, "timing": timing,
                "duplicate_messages": task.get("duplicate_messages", []),
                "metrics": score_task(task, items, budgets),
            }
            result["records"].append(record)
            if (n + 1) % 10 == 0 or n + 1 == len(tasks):
                print(f"  [{label or arm}] {n + 1}/{len(tasks)} tasks, {time.perf_counter() - arm_started:.0f} s",
                      file=sys.stderr)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 — reported; the other arms still run
        result["error"] = f"{exc.__class__.__name__}: {exc}"
        result["interrupted"] = isinstance(exc, KeyboardInterrupt)
        log = work / ".cogd" / "logs" / "daemon.log"
        if log.exists():
            result["daemon_log_tail"] = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    finally:
        if started_daemon:
            try:
                cogd(work, "stop", timeout=60, check=False)
            except Exception as exc:  # noqa: BLE001
                print(f"  [{arm}] cogd stop failed: {exc}", file=sys.stderr)
        kept_cache = embed_cache_file(args, label or arm)
        if kept_cache is not None and started_daemon:
            from cogd.paths import Layout
            cache = Layout(work).index_dir / "embed_cache.db"
            if cache.exists():  # the daemon is stopped: its cache file is complete
                kept_cache.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cache, kept_cache)
        hook_log = work / ".cogd" / "logs" / "hook.log"
        if hook_log.exists():
            result["hook_log_tail"] = hook_log.read_text(encoding="utf-8", errors="replace").splitlines()[-10:]
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        result["git_dir_unchanged"] = snapshot(git_dir) == before
        result["wall_s"] = time.perf_counter() - arm_started
    return result


# ---------------------------------------------------------------- SWE-bench instances and variants

# The data README's BM25 reference for the issue-style file, per repository and in total.
SWE_METRICS = ("file Acc@1", "file Acc@5", "file R@5", "file MRR", "fn Acc@10", "fn MRR",
               "fn in 2000 tok", "fn in 8000 tok")
SWE_REFERENCE = {
    "all": (22.9, 42.7, 47.1, 40.9, 36.6, 25.9, 31.3, 43.9),
    "astropy/astropy": (41.7, 62.5, 66.0, 56.3, 54.2, 38.3, 52.9, 65.8),
    "pylint-dev/pylint": (33.3, 40.0, 50.6, 54.7, 42.9, 32.7, 47.9, 56.4),
    "sphinx-doc/sphinx": (12.3, 35.1, 38.3, 30.8, 27.3, 18.7, 17.7, 31.1),
}
VARIANTS: list[tuple[str, list[str]]] = []  # --variants: (name, ["section.key=value", ...])


def is_swe(rows: list[dict]) -> bool:
    """True for an issue-style file (SWE-bench instances: ``base_commit``, no ``parent``)."""
    return bool(rows) and "base_commit" in rows[0] and "parent" not in rows[0]


def swe_task(row: dict) -> dict:
    """A SWE-bench instance in the commit set's shape: the tree to index is ``base_commit``.

    ``query_mentions_gold_file``: the statement spells a gold file's path or its file name;
    ``query_mentions_gold_function``: it spells a gold function's own (last) name as a word.
    """
    query = row["query"]
    mentions_file = any(f in query or f.rsplit("/", 1)[-1] in query for f in row["gold_files"])
    mentions_fn = any(re.search(r"\b" + re.escape(g.split("::", 1)[-1].rsplit(".", 1)[-1]) + r"\b", query)
                      for g in row["gold_functions"])
    return {**row, "parent": row["base_commit"], "commit": row["instance_id"], "date": row["base_commit_date"],
            "query_mentions_gold_file": mentions_file, "query_mentions_gold_function": mentions_fn}


def by_date(rows: list[dict]) -> list[dict]:
    """Instances oldest first by ``base_commit_date`` (ISO 8601 with offsets, compared as instants)."""
    from datetime import datetime
    return sorted(rows, key=lambda r: datetime.fromisoformat(r["base_commit_date"]))


def parse_variants(text: str) -> list[tuple[str, list[str]]]:
    """``"base:retrieve.prompt_parts=false,retrieve.file_rank=false;full:"`` → [(name, settings)]."""
    out = []
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        name, _, settings = chunk.partition(":")
        out.append((name.strip(), [s.strip() for s in settings.split(",") if s.strip()]))
    return out


def _set_value(config, item: str) -> None:
    key, _, value = item.partition("=")
    section, _, name = key.partition(".")
    target = getattr(config, section)
    current = getattr(target, name)
    if isinstance(current, bool):
        parsed: object = value.lower() == "true"
    elif isinstance(current, int):
        parsed = int(value)
    elif isinstance(current, float):
        parsed = float(value)
    else:
        parsed = value
    setattr(target, name, parsed)


def embed_cache_file(args, label: str) -> Path | None:
    """``--embed-cache DIR``: where this arm's embedding cache is kept between runs
    (``DIR/<label>.embed_cache.db``; the cache is keyed by content, so a second run re-embeds
    only what the first never saw), or None."""
    if not getattr(args, "embed_cache", None):
        return None
    return Path(args.embed_cache) / (re.sub(r"[^\w.-]+", "_", label) + ".embed_cache.db")


def save_index(work: Path, into: Path, commit: str) -> None:
    """A consistent copy of the tree's ``index.db`` (SQLite's online backup: the daemon may be
    writing) as ``into/COMMIT.db``, for a later ``--from-index`` run; with history mined, its
    ``history.db`` too (``into/COMMIT.history.db``: the live set synchronised with this task's
    parent, so a ``--from-index --history on`` run reads exactly the history the hook read)."""
    import sqlite3
    from cogd.paths import Layout
    into.mkdir(parents=True, exist_ok=True)
    layout = Layout(work)
    for name, target in ((layout.index_db, into / f"{commit}.db"),
                         (layout.index_dir / "history.db", into / f"{commit}.history.db")):
        if not Path(name).exists():
            continue
        source = sqlite3.connect(f"file:{name}?mode=ro", uri=True)
        try:
            dest = sqlite3.connect(target)
            try:
                source.backup(dest)
            finally:
                dest.close()
        finally:
            source.close()


def cached_index(args, task: dict) -> Path | None:
    """The ``--from-index`` copy of ``task``'s index, or None (use the tree's own)."""
    if not getattr(args, "from_index", None):
        return None
    path = Path(args.from_index) / f"{task['commit']}.db"
    if not path.exists():
        raise EvalError(f"--from-index: no saved index for {task['commit']} ({path})")
    return path


def _replay_cached(arm, tasks, args, budgets, git_dir, work, index_file, result, arm_started, label,
                   tree=None) -> dict:
    """``--from-index``: move the tree through ``tasks`` and score the default configuration's
    in-process pack (the record) and each variant's on the saved indexes. No daemon, no hook:
    a ranking change is measured in minutes instead of a replay's hour. With ``tree`` (a
    ``--history`` run) the tree is a git repository moved to each parent, and history is read
    from the task's saved ``history.db`` copy when the config enables it."""
    global VARIANTS
    if arm not in ("bm25", "hybrid"):
        raise EvalError("--from-index scores the bm25 and hybrid arms only")
    if arm == "hybrid":
        HYBRID_VECTORS.cache_file = embed_cache_file(args, label or arm)
        if HYBRID_VECTORS.cache_file is None or not HYBRID_VECTORS.cache_file.exists():
            raise EvalError("--from-index on the hybrid arm needs the --embed-cache DIR its --save-index run kept")
    wanted = VARIANTS
    VARIANTS = [("default", [])] + list(wanted)
    result["cached"] = True
    try:
        previous = None
        for n, task in enumerate(tasks):
            if tree is not None:
                tree.move(task["parent"])
            elif n and task["parent"] != previous:
                move_tree(git_dir, work, index_file, previous, task["parent"], result)
            previous = task["parent"]
            index_db = cached_index(args, task)
            history_db = index_db.with_name(f"{task['commit']}.history.db")
            packs = variant_packs(work, arm, task["query"], index_db, history_db if history_db.exists() else None)
            for name, packed in packs:
                entry = {"commit": task["commit"], "query_mentions_gold_file": task["query_mentions_gold_file"],
                         "query_mentions_gold_function": task["query_mentions_gold_function"],
                         "fold": task.get("fold"),
                         "items": [{"id": i["id"], "kind": i["kind"], "end": i["end"],
                                    **({"signals": i["signals"]} if args.signals and i.get("signals") else {})}
                                   for i in packed],
                         "metrics": score_task(task, packed, budgets)}
                if name == "default":
                    result["records"].append({**entry, "gold_files": task["gold_files"],
                                              "gold_functions": task["gold_functions"], "query": task["query"][:300]})
                else:
                    result["variants"][name].append(entry)
            if (n + 1) % 20 == 0 or n + 1 == len(tasks):
                print(f"  [{label or arm}] {n + 1}/{len(tasks)} tasks (cached index), "
                      f"{time.perf_counter() - arm_started:.0f} s", file=sys.stderr)
    finally:
        VARIANTS = wanted
    return result


def variant_packs(work: Path, arm: str, query: str, index_db: Path | None = None,
                  history_db: Path | None = None) -> list[tuple[str, list[dict]]]:
    """The prompt pack of ``query`` under each ``--variants`` configuration, built in this process.

    Reads the tree's ``index.db`` read-only and calls :func:`cogd.retrieve.pack.prompt_pack`
    with ``mode = bm25`` and no ledger feedback (the variants compare retrieval, not learning),
    so a variant costs one pack, not one replay. The bm25 and hybrid arms have variants; the
    hybrid arm's query vector and entity vectors come from :data:`HYBRID_VECTORS`.
    """
    if not VARIANTS or arm not in ("bm25", "hybrid"):
        return []
    from cogd.config import load_config
    from cogd.index import store
    from cogd.paths import Layout
    from cogd.retrieve.pack import prompt_pack

    layout = Layout(work)
    conn = store.connect(index_db or layout.index_db, readonly=True)
    out = []
    try:
        vector = dense = None
        if arm == "hybrid":
            vector, dense = HYBRID_VECTORS.pair(conn, load_config(layout.config_file), work, query)
        for name, settings in VARIANTS:
            config = load_config(layout.config_file)
            for item in settings:
                _set_value(config, item)
            # a variant may set retrieve.mode (bm25 on the hybrid arm's index: the lexical arm's pack,
            # MMR on structural similarity as there); else the arm's mode
            mode = config.retrieve.mode if any(i.startswith("retrieve.mode=") for i in settings) else arm
            vectors = (vector, dense) if mode != "bm25" else (None, None)
            pack = prompt_pack(conn, work, query, config.pack, config.retrieve, mode=mode,
                               query_vector=vectors[0], dense=vectors[1],
                               feedback=history_feedback(layout, config, conn, query, history_db))
            kinds = {i.entity_id: i.kind for i in pack.items}
            signals = {i.entity_id: i.signals for i in pack.items}
            items = parse_pack(pack.text)
            for i in items:
                i["kind"] = kinds.get(i["id"], i["kind"])
                i["signals"] = signals.get(i["id"]) or {}
            out.append((name, items))
    finally:
        conn.close()
    return out


class HybridVectors:
    """The vectors a ``--from-index`` hybrid pack reads, built in this process: each saved
    index's entity vectors looked up in the embedding cache its ``--save-index`` run kept
    (``--embed-cache``; keyed by model and text, as the daemon's embedder keys it), the rare
    miss encoded, and the prompt encoded the way the daemon does (one vector, or one row per
    prose window for a long prompt: :meth:`cogd.daemon.parts.Parts.query_vector`). The model
    is loaded once per run; ``misses`` counts the entity texts the cache lacked."""

    def __init__(self):
        self.cache_file: Path | None = None
        self.encoder = None
        self.model_id = ""
        self.misses = 0
        self._cache = None
        self._dense: dict[str, object] = {}

    def _load(self, config, root: Path) -> None:
        from cogd.embed.cache import EmbeddingCache
        from cogd.embed.encoder import load_encoder
        from cogd.embed.model import resolve_model

        info = resolve_model(config.embed, root)
        self.encoder = load_encoder(info, 1, config.embed.max_tokens, config.embed.batch_size,
                                    batch_tokens=config.embed.batch_tokens)
        self.model_id = info.id
        copy = Path(tempfile.mkdtemp(prefix="cogd-eval-cache-")) / "embed_cache.db"
        shutil.copyfile(self.cache_file, copy)  # the kept cache is never written by a scoring run
        self._cache = EmbeddingCache(copy)

    def dense_index(self, conn, config):
        """A :class:`cogd.index.vectors.DenseIndex` of every entity of ``conn``'s index."""
        import numpy as np
        from cogd.embed.text import entity_text, text_key
        from cogd.index import store
        from cogd.index.vectors import DenseIndex

        rows = store.embedding_rows(conn, list(store.entity_states(conn)))
        texts = {r[0]: entity_text(r[1], r[2], r[3], r[4], r[7], r[5], style=config.embed.text) for r in rows}
        keys = {i: text_key(self.model_id, config.embed.max_tokens, t) for i, t in texts.items()}
        found = self._cache.get_many(list(set(keys.values())))
        missing = [i for i in texts if keys[i] not in found]
        if missing:
            self.misses += len(missing)
            fresh = self.encoder.encode([texts[i] for i in missing])
            new = {keys[i]: fresh[n] for n, i in enumerate(missing)}
            self._cache.put_many(new, self.model_id)
            found.update(new)
        dense = DenseIndex(self.encoder.dim)
        ids = [r[0] for r in rows]
        matrix = np.stack([np.asarray(found[keys[i]], dtype=np.float32) for i in ids]) if ids else np.zeros((0, self.encoder.dim), dtype=np.float32)
        dense.replace(ids, [r[1] for r in rows], matrix)
        return dense

    def pair(self, conn, config, root: Path, query: str):
        """``(query vector(s), DenseIndex)`` for ``query`` on ``conn``'s index (one index kept)."""
        from cogd.retrieve.prompt import WINDOW_CHARS, prose_windows

        if self.encoder is None:
            self._load(config, root)
        key = str(conn.execute("PRAGMA database_list").fetchall()[0][2])
        if key not in self._dense:
            self._dense = {key: self.dense_index(conn, config)}
        if len(query) <= WINDOW_CHARS:
            return self.encoder.encode_query(query[:4000]), self._dense[key]
        windows = prose_windows(query)
        if len(windows) <= 1:
            return self.encoder.encode_query((windows or [query])[0][:4000]), self._dense[key]
        return self.encoder.encode(windows), self._dense[key]


HYBRID_VECTORS = HybridVectors()
_HISTORY_STORES: dict = {}


def history_feedback(layout, config, conn, query: str, history_db: Path | None = None):
    """Feedback carrying only history (associations and co-change) for a variant's pack, read
    from the tree's ``history.db`` or ``history_db`` (a saved copy; read only, synchronised
    with the tree's HEAD), or None when the variant has ``history.enabled=false`` or there is
    no history."""
    path = history_db or layout.index_dir / "history.db"
    if not config.history.enabled or not path.exists():
        return None
    from cogd.history.miner import HistoryMiner
    from cogd.history.query import HistoryQueries
    from cogd.history.store import HistoryStore
    from cogd.retrieve.feedback import Feedback
    from cogd.retrieve.lexical import match_expression, query_terms

    rank = config.rank
    rank.utility_weight = rank.working_set_weight = rank.recency_weight = 0.0
    history = _HISTORY_STORES.get(path)
    if history is None:  # one read-only store per tree for the whole replay
        history = _HISTORY_STORES[path] = HistoryStore(path, readonly=True)
    queries = HistoryQueries(HistoryMiner(layout.root, history, config.history), config.history)

    def assoc(text, tests_unwanted=None):
        terms = query_terms(text)
        found = queries.associations(conn, match_expression(terms), config.retrieve.candidates, text,
                                     None, tests_unwanted, terms)
        return found

    # the daemon's shrinkage: history's weights by the change requests reachable from this HEAD
    return Feedback(rank, history=assoc, co_changed=lambda seeds: queries.co_changed(conn, seeds),
                    evidence=queries.evidence(), file_changes=lambda: queries.file_changes(conn))


def swe_table(title: str, groups: dict[str, list[dict]], budgets: list[int]) -> str:
    """One row per repository (and ``all``) of the README's issue-style metrics, BM25 reference beside."""
    head = f"{'rows':<24} {'n':>3} " + " ".join(f"{m:>14}" for m in SWE_METRICS)
    lines = [title, head]
    for repo, records in groups.items():
        if not records:
            continue
        table = aggregate(records, budgets)
        cells = []
        for m in SWE_METRICS:
            value = table[m]["all"][0] if m in table else None
            cells.append(f"{'-' if value is None else f'{value:.1f}':>14}")
        lines.append(f"{repo:<24} {len(records):>3} " + " ".join(cells))
        ref = SWE_REFERENCE.get(repo)
        if ref:
            lines.append(f"{'  BM25 reference':<24} {'':>3} " + " ".join(f"{v:>14.1f}" for v in ref))
    return "\n".join(lines)


def swe_report(results: list[dict], budgets: list[int]) -> str:
    """Per-repository tables for each arm and each variant of a SWE-bench run."""
    out = []
    for mode in dict.fromkeys(r["mode"] for r in results):
        arm_results = [r for r in results if r["mode"] == mode]
        groups = {r["arm"].split(" @ ", 1)[-1]: r["records"] for r in arm_results}
        groups = {"all": [rec for recs in groups.values() for rec in recs], **groups}
        source = "in process, saved indexes" if any(r.get("cached") for r in arm_results) else "real hook"
        out.append(swe_table(f"\narm {mode} ({source})", groups, budgets))
        for name, _ in VARIANTS:
            vgroups = {r["arm"].split(" @ ", 1)[-1]: r["variants"].get(name, []) for r in arm_results}
            if not any(vgroups.values()):
                continue
            vgroups = {"all": [rec for recs in vgroups.values() for rec in recs], **vgroups}
            out.append(swe_table(f"\narm {mode}, variant {name} (in process, no ledger feedback)", vgroups, budgets))
    return "\n".join(out)


# ---------------------------------------------------------------- report

VARIANT_COLUMNS = (("file R@1", "all"), ("file R@5", "all"), ("file MRR", "all"), ("file in 2000 tok", "all"),
                   ("fn in 2000 tok", "all"), ("fn in 2000 tok", "no-mention"), ("fn R@5", "all"), ("fn MRR", "all"))
FOLD_METRICS = ("file R@5", "file MRR", "fn in 2000 tok", "fn MRR")


def _fold_means(entries: list[dict], metric: str) -> dict[int, float]:
    """fold → macro mean (%) of ``metric`` over the entries of that fold that have it."""
    folds: dict[int, list[float]] = {}
    for e in entries:
        if e.get("fold") is not None and metric in e["metrics"]:
            folds.setdefault(e["fold"], []).append(e["metrics"][metric])
    return {f: 100 * sum(v) / len(v) for f, v in sorted(folds.items())}


CV_METRICS = ("file R@5", "file MRR", "fn in 2000 tok", "fn MRR")  # the objective's sum and the bar


def _cv_objective(entries: dict[str, dict], base: dict[str, dict], commits: set[str]) -> float:
    """Mean over ``commits`` of the sum of :data:`CV_METRICS` a task has, minus the default's."""
    total = [sum(entries[c]["metrics"].get(m, 0.0) - base[c]["metrics"].get(m, 0.0) for m in CV_METRICS)
             for c in commits if c in entries and c in base]
    return sum(total) / len(total) if total else 0.0


def variant_cv(default: list[dict], variants: dict[str, list[dict]]) -> list[str]:
    """Cross-validation of the choice among ``default`` and ``variants`` over the tasks' ``fold``:
    for each fold the variant with the best :func:`_cv_objective` on the other four folds (ties:
    the default, so a variant must gain to be chosen), judged on the held-out fold against the
    default, paired by task, per metric of :data:`CV_METRICS`: the mean delta and the 95 %
    paired-bootstrap interval (:func:`_replay_cv.bootstrap_interval`, as the replay's ``--cv``);
    a fold *loses* when a whole interval is below 0."""
    from _replay_cv import bootstrap_interval  # noqa: E402 — scripts/ is on sys.path when run as a script

    base = {e["commit"]: e for e in default}
    arms = {"default": base, **{n: {e["commit"]: e for e in v} for n, v in variants.items() if v}}
    folds = {e["commit"]: e.get("fold") for e in default}
    out = [f"cross-validation over folds (objective: mean {' + '.join(CV_METRICS)} minus the default's, "
           "on the other four folds; held-out deltas with paired-bootstrap 95% intervals)"]
    for fold in sorted({f for f in folds.values() if f is not None}):
        held = {c for c, f in folds.items() if f == fold}
        training = {c for c, f in folds.items() if f is not None and f != fold}
        chosen = max(arms, key=lambda n: (round(_cv_objective(arms[n], base, training), 12), n == "default"))
        cells = []
        for metric in CV_METRICS:
            diffs = [arms[chosen][c]["metrics"][metric] - base[c]["metrics"][metric] for c in sorted(held)
                     if metric in base[c]["metrics"] and metric in arms[chosen].get(c, {}).get("metrics", {})]
            lo, hi = bootstrap_interval(diffs, f"fold{fold}:{chosen}:{metric}")
            mean = 100 * sum(diffs) / len(diffs) if diffs else 0.0
            cells.append(f"{metric} {mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]{' LOSES' if 100 * hi < 0 else ''}")
        out.append(f"  fold {fold} ({len(held)} tasks): chosen {chosen}; " + "; ".join(cells))
    everything = {c for c, f in folds.items() if f is not None}
    best = max(arms, key=lambda n: (round(_cv_objective(arms[n], base, everything), 12), n == "default"))
    out.append(f"  chosen on all folds: {best}")
    return out


def variant_report(results: list[dict], budgets: list[int]) -> str:
    """For a commit-set run with ``--variants``: one row per variant (the record first, as
    ``default``) of the README's columns, then each variant's per-fold deltas against the
    record (``fold`` 0–4: the cross-validation rule — a new default must lose no fold beyond
    noise) at file R@5, file MRR, function recall within 2,000 tokens and function MRR."""
    out = []
    for res in results:
        if not res.get("variants") or not res["records"]:
            continue
        rows = [("default", res["records"])] + [(n, v) for n, v in res["variants"].items() if v]
        head = " | ".join(f"{m}{' (no mention)' if c != 'all' else ''}" for m, c in VARIANT_COLUMNS)
        out += ["", f"arm {res['arm']}: variants ({len(res['records'])} tasks)", f"| variant | {head} |"]
        for name, entries in rows:
            table = aggregate(entries, budgets)
            cells = " | ".join(f"{table[m][c][0]:.1f}" if table[m][c][0] is not None else "-" for m, c in VARIANT_COLUMNS)
            out.append(f"| {name} | {cells} |")
        base = {m: _fold_means(res["records"], m) for m in FOLD_METRICS}
        out.append("per-fold deltas against default (folds 0..4): " + ", ".join(FOLD_METRICS))
        for name, entries in rows[1:]:
            parts = []
            for m in FOLD_METRICS:
                mine = _fold_means(entries, m)
                parts.append(" ".join(f"{mine[f] - base[m][f]:+.1f}" for f in base[m] if f in mine))
            out.append(f"  {name}: " + " | ".join(parts))
        out += variant_cv(res["records"], res["variants"])
    return "\n".join(out)


def report(results: list[dict], budgets: list[int], swe: bool = False) -> str:
    """The text report: per arm its table (not for a SWE-bench file: :func:`swe_report`), timings, checks."""
    out = []
    tables = {}
    for res in results:
        if res["records"]:
            tables[res["arm"]] = aggregate(res["records"], budgets)
    for res in results:
        arm = res["arm"]
        out.append("")
        if res["error"]:
            out.append(f"arm {arm}: FAILED after {len(res['records'])} tasks: {res['error']}")
            for line in res.get("daemon_log_tail", [])[-5:]:
                out.append(f"    daemon.log: {line}")
        if arm not in tables:
            continue
        if swe:
            out.append(f"arm {arm}: {len(res['records'])} instances")
        else:
            out.append(format_table(arm, tables[arm], budgets))
        if not swe:
            out.append("README BM25 reference (newest 150): file R@1/5/10/20 = 37.4/80.9/91.6/96.1, MRR 63.4; "
                   "fn R@1/5/10/20 = 16.8/44.7/56.6/68.2, MRR 40.0; in 2000/4000/8000 tok: "
                   "file 81.7/86.4/89.6, fn 51.9/63.5/70.2")
        if not swe:
            out.extend(goal_lines(arm, tables[arm], tables.get("bm25") if arm != "bm25" else None))
        recs = res["records"]
        if res.get("cached"):
            out.append(f"arm {arm}: in-process packs on saved indexes (--from-index), {res['wall_s']:.1f} s")
            continue
        totals = [r["timing"]["total"] for r in recs]
        hooks = [r["timing"]["hook"] for r in recs]
        idx = [r["timing"]["index"] for r in recs if "index" in r["timing"]]
        emb = [r["timing"]["embed_wait"] for r in recs if "embed_wait" in r["timing"]]
        out.append(f"timing {arm}: wall {res['wall_s']:.1f} s for {len(recs)} tasks (initial index "
                   f"{res.get('initial_index_s', 0):.1f} s, {res.get('initial_index', {})}); per task p50 "
                   f"{statistics.median(totals):.2f} s (p95 {pct(totals, 0.95):.2f}); hook p50 "
                   f"{1000 * statistics.median(hooks):.0f} ms (p95 {1000 * pct(hooks, 0.95):.0f}, "
                   f"over the shipped {SHIPPED_DEADLINE_MS} ms deadline: {sum(h * 1000 > SHIPPED_DEADLINE_MS for h in hooks)}); "
                   f"cogd index p50 {statistics.median(idx) if idx else 0:.2f} s"
                   + (f"; embedding wait p50 {statistics.median(emb):.2f} s, max {max(emb):.1f} s, total {sum(emb):.0f} s"
                      if emb else ""))
        empty = sum(1 for r in recs if not r["items"])
        ids = [len(r["items"]) for r in recs]
        checks = [r["check"] for r in recs if r["check"]]
        out.append(f"packs {arm}: {empty} empty; ids per pack p50 {statistics.median(ids):.0f} (min {min(ids)}); "
                   f"pack chars p50 {statistics.median(r['pack_chars'] for r in recs):.0f}; "
                   + (f"cogd context agrees with the hook on ids {sum(c['same_ids'] for c in checks)}/{len(checks)}, "
                      f"text {sum(c['same_text'] for c in checks)}/{len(checks)}, "
                      f"block sizes {sum(c['chars_match'] for c in checks)}/{len(checks)}; " if checks else "")
                   + f"git dir unchanged: {res['git_dir_unchanged']}")
        status = res.get("initial_status") or {}
        out.append(f"daemon {arm}: version {status.get('version')}, status reports embedding="
                   f"{json.dumps(status.get('embedding'))}, retrieve={json.dumps(status.get('retrieve'))}")
        embs = [r["embedding"] for r in recs if r.get("embedding") is not None]
        if embs:
            states = {}
            for e in embs:
                key = e.get("state") if isinstance(e, dict) else str(e)
                states[key] = states.get(key, 0) + 1
            short = sum(1 for e in embs if not isinstance(e, dict) or (e.get("coverage") or 0) < 1.0
                        or e.get("error"))
            out.append(f"embedder {arm} when the hook ran: states {states}; tasks without full coverage or "
                       f"with an embedder error: {short}/{len(embs)}; last {json.dumps(embs[-1])}")
        if arm != "bm25" and "bm25" in tables:
            base = {r["commit"]: [i["id"] for i in r["items"]]
                    for res2 in results if res2["arm"] == "bm25" for r in res2["records"]}
            same = [base.get(r["commit"]) == [i["id"] for i in r["items"]] for r in recs if r["commit"] in base]
            out.append(f"identical to the bm25 arm's pack order on {sum(same)}/{len(same)} tasks"
                       + (" — this mode does not change retrieval yet" if same and all(same) else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", required=True, action="append",
                        help="a full-history git directory (outside the project): PATH for the commit set, "
                             "OWNER/NAME=PATH per repository of a SWE-bench file (repeatable)")
    parser.add_argument("--variants", default="",
                        help="bm25 and hybrid arms: extra packs per task built in process, "
                             "'name:section.key=value,...;name2:...' (see variant_packs)")
    parser.add_argument("--repos", default="", help="SWE-bench file: only these OWNER/NAME, comma-separated")
    parser.add_argument("--tasks", default=str(DEFAULT_TASKS))
    parser.add_argument("--last", type=int, default=150, help="the newest N tasks (default 150)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N of the selected tasks")
    parser.add_argument("--arms", default="bm25,vector,hybrid")
    parser.add_argument("--budgets", default="2000,4000,8000", help="pack budgets in tokens (chars / 4)")
    parser.add_argument("--out", default=None, help="write per-task results and tables as JSON here")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="extra .cogd/config.toml values (repeatable)")
    parser.add_argument("--embed-timeout", type=float, default=600.0, help="seconds to wait for embedding coverage 1.0 per task")
    parser.add_argument("--no-context", action="store_true", help="skip the `cogd context --json` cross-check")
    parser.add_argument("--history", default="", metavar="off,on",
                        help="run each arm with history mining off and/or on: the scratch tree is then a git "
                             "repository whose HEAD is each task's parent (see run_arm)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch trees (daemons are stopped anyway)")
    parser.add_argument("--save-index", default=None, metavar="DIR",
                        help="keep a copy of each task's index.db (and history.db) in DIR (for --from-index)")
    parser.add_argument("--from-index", default=None, metavar="DIR",
                        help="bm25 or hybrid arm (hybrid: with the saving run's --embed-cache): no daemon, no "
                             "hook; score in-process packs on the index.db copies a --save-index run kept "
                             "(the tree is still moved, for the packs' text)")
    parser.add_argument("--embed-cache", default=None, metavar="DIR",
                        help="keep each arm's embedding cache in DIR between runs (copied in before the daemon "
                             "starts, back after it stops)")
    parser.add_argument("--signals", action="store_true",
                        help="--from-index: keep each pack item's ranking signals in --out (for an analysis)")
    parser.add_argument("--cogd-src", default=None, metavar="DIR",
                        help="put DIR first on cogd's PYTHONPATH (e.g. an exported older cogd/ to compare against)")
    args = parser.parse_args(argv)
    global COGD_SRC, VARIANTS
    VARIANTS = parse_variants(args.variants)
    COGD_SRC = str(Path(args.cogd_src).resolve()) if args.cogd_src else None

    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    rows = [json.loads(line) for line in Path(args.tasks).read_text(encoding="utf-8").splitlines() if line.strip()]
    swe = is_swe(rows)
    git_dirs: dict[str, Path] = {}
    for item in args.git_dir:
        repo, eq, path = item.rpartition("=")
        git_dirs[repo if eq else ""] = Path(path)
    for repo, path in git_dirs.items():
        if not (path / "objects").is_dir():
            parser.error(f"{path} is not a git directory (no objects/)")
    plan: list[tuple[str, list[dict], Path]] = []  # (repository, its tasks oldest first, git dir)
    if swe:
        # Instances are sorted by their base commit's date (the README) and replayed per repository.
        wanted = [r.strip() for r in args.repos.split(",") if r.strip()]  # also the order to run them in
        rows = [swe_task(r) for r in by_date(rows) if not wanted or r["repo"] in wanted]
        for repo in wanted or dict.fromkeys(r["repo"] for r in rows):
            if repo not in git_dirs:
                parser.error(f"no --git-dir {repo}=PATH for the {repo} instances")
            repo_tasks = [r for r in rows if r["repo"] == repo]
            if args.limit:
                repo_tasks = repo_tasks[: args.limit]
            plan.append((repo, repo_tasks, git_dirs[repo]))
        tasks = [t for _, ts, _ in plan for t in ts]
    else:
        # The file is oldest first (the README); its order is the replay order.
        tasks = rows[-args.last:] if args.last else rows
        if args.limit:
            tasks = tasks[: args.limit]
        if "" not in git_dirs:
            parser.error("--git-dir PATH is needed for the commit set")
        plan.append(("", tasks, git_dirs[""]))
    for tool in ("cogd", "cogd-hook"):
        if not (BIN / tool).exists():
            parser.error(f"{BIN / tool} not found: run with the interpreter of cogd's environment")

    def on_term(signum, frame):  # noqa: ARG001 — let the finally blocks stop daemons and clean up
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    print(f"{len(tasks)} tasks ({tasks[0]['date'][:10]} … {tasks[-1]['date'][:10]}), arms {arms}", file=sys.stderr)
    source = cogd_source()
    print(f"cogd code: {source}", file=sys.stderr)
    results = []
    histories = [h.strip() for h in args.history.split(",") if h.strip()] or [None]
    if histories != [None] and not swe:
        print(f"duplicate messages: {mark_duplicates(Path(plan[0][2]).resolve(), tasks)} tasks quote an earlier "
              "reachable commit's message", file=sys.stderr)
    for arm, history in [(arm, h) for arm in arms for h in histories]:
        for repo, repo_tasks, git_dir in plan:
            name = (f"{arm} @ {repo}" if repo else arm) + (f" history {history}" if history else "")
            print(f"arm {name} …", file=sys.stderr)
            results.append(run_arm(arm, repo_tasks, args, budgets, git_dir, name, history))
            if results[-1].get("interrupted"):
                break
        if results and results[-1].get("interrupted"):
            print("interrupted: no further arms; reporting what ran", file=sys.stderr)
            break
    text = report(results, budgets, swe)
    if histories != [None]:
        text += "\n" + block_table(results) + "\n" + "\n".join(duplicate_lines(results))
    if swe:
        text += "\n" + swe_report(results, budgets)
    elif VARIANTS:
        text += "\n" + variant_report(results, budgets)
    changed = source.get("uncommitted")
    text = (f"cogd code: {source['path']} (project HEAD {source.get('project_head')}"
            + (f", uncommitted changes in {len(changed)} paths under cogd/" if changed else "") + ")\n") + text
    print(text)
    if args.out:
        payload = {
            "cogd_source": source, "tasks": args.tasks, "last": args.last, "limit": args.limit, "budgets": budgets,
            "arms": [{**{k: v for k, v in r.items()}, "table": aggregate(r["records"], budgets) if r["records"] else None}
                     for r in results],
            "report": text,
        }
        Path(args.out).write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return 1 if any(r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
