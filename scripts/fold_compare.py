#!/usr/bin/env python3
"""Per-fold comparison of an ``eval_retrieval.py --variants`` run against one of its packs.

``eval_retrieval.py`` reports each variant's per-fold deltas against the default pack and a
cross-validation of the choice. This compares every pack of one arm (the default record and
each variant) against a *baseline* pack of the same run (e.g. a variant with history off,
``hoff:history.enabled=false``), fold by fold (the tasks' ``fold``, 0-4), paired by task: for
each metric the baseline's macro mean, each pack's delta and its 95 % paired-bootstrap interval
(:func:`_replay_cv.bootstrap_interval`, 2,000 resamples), on all tasks and on the tasks whose
query names no gold item (file metrics split by ``query_mentions_gold_file``, function metrics
by ``query_mentions_gold_function``, as the run's tables). A fold *loses* when the whole
interval is below 0; the last line per pack lists its losses. ``--cv 'REF:A,B,…'`` also runs
``eval_retrieval.py``'s cross-validation of the choice (:func:`eval_retrieval.variant_cv`) among
the packs ``REF``, ``A``, ``B``… only, against ``REF`` (a pack of the run that is not a
candidate, such as history off, is then left out of the choice).

Several runs on the same saved indexes (``--from-index``) may be given: their variants are
pooled by name (their default packs must be the same, which is checked).

    python scripts/fold_compare.py RUN.json [RUN2.json …] --base hoff [--arm 'hybrid history on']
        [--metrics 'file R@5,file MRR,fn in 2000 tok,fn MRR'] [--cv 'default:f05,f1'] [--json OUT.json]

Standard library only. Values in per cent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _replay_cv import bootstrap_interval  # noqa: E402 — scripts/ is on sys.path when run as a script

METRICS = ("file R@5", "file MRR", "fn in 2000 tok", "fn MRR", "fn R@5")


def _split_flag(metric: str) -> str:
    return "query_mentions_gold_file" if metric.startswith("file") else "query_mentions_gold_function"


def _values(entries: list[dict], metric: str, no_mention: bool) -> dict[str, float]:
    """``{commit: value in [0, 1]}`` of ``metric`` (the no-mention tasks only with ``no_mention``)."""
    flag = _split_flag(metric)
    return {e["commit"]: e["metrics"][metric] for e in entries
            if e["metrics"].get(metric) is not None and not (no_mention and e.get(flag))}


def compare(packs: dict[str, list[dict]], base: str, metrics: tuple[str, ...]) -> dict:
    """``{pack: {split: {metric: {fold: {"base", "mean", "delta", "low", "high", "n"}}}}}`` for every
    pack but ``base``; fold ``"all"`` pools the folds. Raises KeyError for an unknown ``base``."""
    baseline = packs[base]
    folds = {e["commit"]: e.get("fold") for e in baseline}
    out: dict = {}
    for name, entries in packs.items():
        if name == base:
            continue
        for split in ("all", "no-mention"):
            for metric in metrics:
                b = _values(baseline, metric, split == "no-mention")
                v = _values(entries, metric, split == "no-mention")
                common = sorted(set(b) & set(v))
                for fold in sorted({folds[c] for c in common if folds.get(c) is not None}) + ["all"]:
                    chosen = [c for c in common if fold == "all" or folds.get(c) == fold]
                    if not chosen:
                        continue
                    diffs = [100 * (v[c] - b[c]) for c in chosen]
                    low, high = bootstrap_interval(diffs, f"{name}/{split}/{metric}/{fold}")
                    out.setdefault(name, {}).setdefault(split, {}).setdefault(metric, {})[str(fold)] = {
                        "base": 100 * sum(b[c] for c in chosen) / len(chosen),
                        "mean": 100 * sum(v[c] for c in chosen) / len(chosen),
                        "delta": sum(diffs) / len(diffs), "low": low, "high": high, "n": len(chosen)}
    return out


def render(found: dict, base: str) -> str:
    """Markdown tables of :func:`compare`'s result: one per pack and split."""
    lines = []
    for name, splits in found.items():
        losses = []
        for split, metrics in splits.items():
            folds = [f for f in next(iter(metrics.values()))]
            lines += ["", f"{name} against {base}, {split} tasks: value (Δ [95 % interval]) per fold",
                      "| metric | " + " | ".join(f"fold {f}" if f != "all" else "all" for f in folds) + " |",
                      "|---|" + "---|" * len(folds)]
            for metric, per_fold in metrics.items():
                cells = []
                for fold in folds:
                    c = per_fold.get(fold)
                    if c is None:
                        cells.append("-")
                        continue
                    cells.append(f"{c['mean']:.1f} ({c['delta']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}])")
                    if c["high"] < 0:
                        losses.append(f"{split} {metric} fold {fold}")
                lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        lines.append(f"{name}: losses beyond noise against {base}: {', '.join(losses) if losses else 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="eval_retrieval.py --out JSON files with --variants")
    parser.add_argument("--base", required=True, help="the pack to compare against: 'default' or a variant's name")
    parser.add_argument("--arm", default=None, help="the arm's label (default: the first arm with variants)")
    parser.add_argument("--metrics", default=",".join(METRICS))
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--cv", default="", metavar="REF:A,B",
                        help="cross-validate the choice among these packs, against REF")
    parser.add_argument("--cv-metrics", default="", metavar="M1,M2",
                        help="the objective's metrics for --cv (default eval_retrieval.CV_METRICS); e.g. "
                             "'fn in 2000 tok (entity only)' where a pack places file entities, which the "
                             "plain row counts as delivering every definition of their file")
    args = parser.parse_args(argv)
    packs: dict[str, list[dict]] = {}
    arm = None
    for run in args.runs:
        payload = json.loads(run.read_text(encoding="utf-8"))
        arms = [a for a in payload["arms"] if a.get("variants") and (args.arm is None or a["arm"] == args.arm)]
        if not arms:
            parser.error(f"{run}: no arm with variants" + (f" named {args.arm!r}" if args.arm else ""))
        found = arms[0]
        if arm is None:
            arm, packs["default"] = found, found["records"]
        elif ([(r["commit"], [i["id"] for i in r["items"]]) for r in found["records"]]
              != [(r["commit"], [i["id"] for i in r["items"]]) for r in packs["default"]]):
            parser.error(f"{run}: its default packs differ from {args.runs[0]}'s: not the same saved indexes and code")
        for name, entries in found["variants"].items():
            if entries:
                packs.setdefault(name, entries)
    if args.base not in packs:
        parser.error(f"--base {args.base!r} is none of {', '.join(packs)}")
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    found = compare(packs, args.base, metrics)
    print(f"arm {arm['arm']}: {len(arm['records'])} tasks; packs {', '.join(packs)}")
    print(render(found, args.base))
    if args.cv:
        import eval_retrieval  # noqa: E402 — scripts/ is on sys.path when run as a script

        if args.cv_metrics:
            eval_retrieval.CV_METRICS = tuple(m.strip() for m in args.cv_metrics.split(",") if m.strip())
        variant_cv = eval_retrieval.variant_cv
        ref, _, names = args.cv.partition(":")
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in [ref, *wanted] if n not in packs]
        if unknown:
            parser.error(f"--cv: no pack {', '.join(unknown)}")
        print(f"\ncross-validation among {', '.join([ref, *wanted])} (reference {ref})")
        lines = variant_cv(packs[ref], {n: packs[n] for n in wanted if n != ref})
        print("\n".join(line.replace("the default's", f"{ref}'s").replace("chosen default", f"chosen {ref}")
                        .replace("chosen on all folds: default", f"chosen on all folds: {ref}") for line in lines))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
