"""Cross-validation of the replay's feedback weights over the development set's ``fold`` field.

Used by ``replay_sessions.py --cv``. Every candidate weight setting is one arm of the same
prequential replay (sessions in time order, each pack scored before its own session's
feedback, learning only from earlier sessions). Choosing among candidates is a second,
separate step, and it is the one cross-validated here: for each fold ``f`` (0–4) the
candidate is chosen on the sessions of the other four folds and judged on the sessions of
fold ``f`` against the ``off`` arm, paired task by task. The held-out fold's scores never
take part in its own choice (:func:`choose`, checked by ``tests/test_replay_cv.py``).

Objective (what "best" means when choosing): the mean over the training sessions of
``fn R + fn MRR`` (both in [0, 1]) minus the off arm's, paired by task (rule ``mean``), or the
worst of the training folds' such means (rule ``worst``: the candidate whose weakest fold is
strongest, a guard against one lucky fold); ties go to the candidate listed first (``off``
first, so a candidate must gain to be chosen).

Noise (when a difference counts): a paired bootstrap over the held-out fold's tasks —
resample its tasks with replacement ``BOOTSTRAP_RESAMPLES`` times (a generator seeded per
fold and metric), take the mean of ``arm − off`` each time, and keep the 2.5 and 97.5
percentiles (Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13: the
percentile interval). A fold **loses by more than noise** when that whole interval is below 0.
Beside it the exact two-sided sign test over the tasks whose value differs (binomial with
p = 1/2) is reported.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Iterable

FOLDS = (0, 1, 2, 3, 4)
METRICS = ("fn_R", "fn_MRR", "file_R@5")  # reported per fold; the first two are the acceptance bar
BAR_METRICS = ("fn_R", "fn_MRR")
BOOTSTRAP_RESAMPLES = 10_000
BASELINE = "off"


def lost(record: dict) -> bool:
    """Whether the hook printed a pack the replay then found no delivery for (scored as empty).

    Older replays read the ledger right after the hook exited; on a loaded machine the daemon
    records the pack only when the hook's acknowledgement arrives, sometimes later. Such a
    session measures the machine, not the ranking, so paired comparisons leave its task out.
    """
    pack = record.get("pack", {})
    return not pack.get("items") and pack.get("hook_chars", 0) > 0


def per_task(records: list[dict], metric: str) -> dict[str, float]:
    """``{commit: value}`` of ``metric`` over the records that have it (in [0, 1]), lost packs left out."""
    return {r["commit"]: r["metrics"][metric] for r in records
            if r["metrics"].get(metric) is not None and not lost(r)}


def objective(records: list[dict], commits: set[str], base: list[dict] | None = None) -> float:
    """Mean of ``fn R + fn MRR`` over the records of ``commits`` with gold functions, minus ``base``'s
    (lost packs left out, :func:`lost`).

    ``base``: the records of the ``off`` arm of the same run (None: no subtraction). Paired
    by commit, so arms from separate runs are compared each with its own baseline. 0 for no task.
    """
    recall, mrr = per_task(records, "fn_R"), per_task(records, "fn_MRR")
    own = {c: recall[c] + mrr[c] for c in recall if c in commits and c in mrr}
    if base is not None:
        base_recall, base_mrr = per_task(base, "fn_R"), per_task(base, "fn_MRR")
        own = {c: v - base_recall[c] - base_mrr[c] for c, v in own.items() if c in base_recall and c in base_mrr}
    return sum(own.values()) / len(own) if own else 0.0


RULES = ("mean", "worst")


def score(records: list[dict], commits: set[str], base: list[dict] | None, folds: dict[str, int],
          rule: str = "mean") -> float:
    """:func:`objective` over ``commits`` (``mean``), or its minimum over the folds ``commits`` span (``worst``)."""
    if rule == "mean":
        return objective(records, commits, base)
    if rule != "worst":
        raise ValueError(f"unknown rule {rule!r}; choose from {', '.join(RULES)}")
    spans = sorted({folds[c] for c in commits})
    return min((objective(records, {c for c in commits if folds[c] == f}, base) for f in spans), default=0.0)


def choose(arms: dict[str, list[dict]], folds: dict[str, int], held_out: int,
           baselines: dict[str, list[dict]] | None = None, rule: str = "mean") -> tuple[str, set[str]]:
    """The candidate with the best :func:`objective` over the sessions **not** in fold ``held_out``.

    ``arms``: ``{candidate name: records}`` in preference order (ties go to the first);
    ``folds``: ``{commit: fold}``; ``baselines``: ``{candidate: its run's off records}``
    (default: ``arms["off"]`` when there is one, else no subtraction); ``rule``: :data:`RULES`.
    Returns ``(name, training commits)``; the training commits never include a commit of
    ``held_out`` (the caller's check and the test's). Raises ValueError for no candidate.
    """
    if not arms:
        raise ValueError("no candidate arm to choose from")
    baselines = baselines or {}
    training = {commit for commit, fold in folds.items() if fold != held_out}
    best_name, best_score = None, -math.inf
    for name, records in arms.items():
        value = score(records, training, baselines.get(name, arms.get(BASELINE)), folds, rule)
        if value > best_score + 1e-12:
            best_name, best_score = name, value
    return best_name, training


def bootstrap_interval(diffs: list[float], seed: str, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """The 95 % percentile interval of the mean of ``diffs`` under resampling with replacement.

    ``seed`` makes it reproducible. (0, 0) for no differences.
    """
    if not diffs:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(math.ceil(0.975 * (resamples - 1)))]


def sign_test(diffs: Iterable[float]) -> float:
    """Exact two-sided sign test p-value over the non-zero ``diffs`` (1.0 when all are zero)."""
    signs = [d for d in diffs if abs(d) > 1e-12]
    n, wins = len(signs), sum(d > 0 for d in signs)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(wins, n - wins) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def compare(arm: list[dict], base: list[dict], commits: set[str], metric: str, seed: str) -> dict:
    """``arm`` against ``base`` on ``metric`` over ``commits``, paired by task (values in per cent)."""
    a, b = per_task(arm, metric), per_task(base, metric)
    keys = sorted(k for k in commits if k in a and k in b)
    diffs = [a[k] - b[k] for k in keys]
    lo, hi = bootstrap_interval(diffs, f"{seed}:{metric}")
    mean_a = 100 * sum(a[k] for k in keys) / len(keys) if keys else None
    mean_b = 100 * sum(b[k] for k in keys) / len(keys) if keys else None
    return {"n": len(keys), "arm": mean_a, "off": mean_b,
            "delta": None if mean_a is None else mean_a - mean_b,
            "ci": (100 * lo, 100 * hi), "sign_p": sign_test(diffs),
            "loses": bool(keys) and 100 * hi < 0}


def cross_validate(arms: dict[str, list[dict]], folds: dict[str, int], fixed: str | None = None,
                   baselines: dict[str, list[dict]] | None = None, rule: str = "mean") -> dict:
    """Per held-out fold: the candidate chosen on the other folds, and it (or ``fixed``) against off.

    ``arms`` must hold ``off`` (the baseline, also a candidate: choosing it means "learning did
    not pay on the training folds"). Returns ``{"folds": [row per fold], "spread": {metric:
    {...}}, "all_folds_choice": name}``; each row has ``fold``, ``tasks``, ``chosen``, and per
    metric the :func:`compare` result. With ``fixed`` the named arm is judged on every fold
    instead of the per-fold choice (the shipped defaults' table). ``baselines``: ``{arm: the off
    records of the run it came from}`` when arms of several runs are pooled (default
    ``arms["off"]`` for every arm); each arm is chosen and judged against its own run's off.
    ``rule``: how candidates are scored on the training folds (:func:`score`).
    """
    if BASELINE not in arms:
        raise ValueError("cross-validation needs the off arm as its baseline")
    baselines = baselines or {}

    def own_off(name: str) -> list[dict]:
        return baselines.get(name, arms[BASELINE])

    rows = []
    for fold in FOLDS:
        held = {c for c, f in folds.items() if f == fold}
        if not held:
            continue
        chosen, training = choose(arms, folds, fold, baselines, rule)
        assert not (training & held), "a held-out fold's task took part in its own weight choice"
        judged = fixed or chosen
        row = {"fold": fold, "tasks": len(held), "chosen": chosen, "judged": judged,
               "training_tasks": len(training)}
        for metric in METRICS:
            row[metric] = compare(arms[judged], own_off(judged), held, metric, f"fold{fold}:{judged}")
        rows.append(row)
    spread = {}
    for metric in METRICS:
        deltas = [r[metric]["delta"] for r in rows if r[metric]["delta"] is not None]
        spread[metric] = {"mean": statistics.mean(deltas) if deltas else None,
                          "sd": statistics.stdev(deltas) if len(deltas) > 1 else 0.0,
                          "min": min(deltas) if deltas else None, "max": max(deltas) if deltas else None}
    everything = set(folds)
    all_choice = max(arms, key=lambda name: (score(arms[name], everything, own_off(name), folds, rule),
                                             -list(arms).index(name)))
    return {"folds": rows, "spread": spread, "all_folds_choice": all_choice, "rule": rule,
            "passes": all(not r[m]["loses"] for r in rows for m in BAR_METRICS)}


def render(cv: dict, title: str) -> list[str]:
    """Markdown lines: one row per fold (chosen candidate, on vs off per metric with its 95 % interval)."""
    out = [f"### {title}", "",
           "| fold | tasks | judged arm | fn R on / off | Δ [95% CI] | fn MRR on / off | Δ [95% CI] | "
           "file R@5 on / off | Δ | sign p (R, MRR) | loses? |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(value, digits=1):
        return "-" if value is None else f"{value:.{digits}f}"

    for r in cv["folds"]:
        cells = []
        for metric in METRICS:
            c = r[metric]
            cells.append(f"{f(c['arm'])} / {f(c['off'])}")
            if metric in BAR_METRICS:
                cells.append(f"{f(c['delta'], 2)} [{c['ci'][0]:.1f}, {c['ci'][1]:.1f}]")
            else:
                cells.append(f(c["delta"], 2))
        loses = [m for m in BAR_METRICS if r[m]["loses"]]
        out.append(f"| {r['fold']} | {r['tasks']} ({r['fn_R']['n']} with fns) | {r['judged']} | " + " | ".join(cells)
                   + f" | {r['fn_R']['sign_p']:.2f}, {r['fn_MRR']['sign_p']:.2f} | "
                   + (", ".join(loses) if loses else "no") + " |")
    s = cv["spread"]
    out += ["", "spread of Δ (points) across folds: " + "; ".join(
        f"{m} mean {f(s[m]['mean'], 2)}, sd {f(s[m]['sd'], 2)}, min {f(s[m]['min'], 2)}, max {f(s[m]['max'], 2)}"
        for m in METRICS),
        f"chosen on all folds together (rule {cv.get('rule', 'mean')}): {cv['all_folds_choice']}; bar (no fold loses by more than noise at "
        f"fn R and fn MRR): {'MET' if cv['passes'] else 'NOT met'}", ""]
    return out
