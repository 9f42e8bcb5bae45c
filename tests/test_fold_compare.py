"""scripts/fold_compare.py: packs of one ``eval_retrieval.py --variants`` run compared fold by fold
against a baseline pack, paired by task, on all tasks and on those whose query names no gold item;
several runs pooled only when their default packs are the same."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import fold_compare  # noqa: E402


def entry(commit: str, fold: int, recall: float, mentions: bool = False) -> dict:
    return {"commit": commit, "fold": fold, "query_mentions_gold_file": mentions,
            "query_mentions_gold_function": mentions, "items": [{"id": f"{commit}.py"}],
            "metrics": {"file R@5": recall, "fn MRR": recall / 2}}


def run(path: Path, default: list[dict], **variants: list[dict]) -> Path:
    path.write_text(json.dumps({"arms": [{"arm": "hybrid history on", "records": default, "variants": variants}]}))
    return path


def test_deltas_per_fold_are_paired_and_split_by_mention():
    base = [entry("a", 0, 0.5), entry("b", 0, 1.0, mentions=True), entry("c", 1, 0.0)]
    better = [entry("a", 0, 1.0), entry("b", 0, 1.0, mentions=True), entry("c", 1, 0.0)]
    found = fold_compare.compare({"off": base, "on": better}, "off", ("file R@5",))
    cell = found["on"]["all"]["file R@5"]
    assert cell["0"]["base"] == 75.0 and cell["0"]["mean"] == 100.0 and cell["0"]["delta"] == 25.0
    assert cell["1"]["delta"] == 0.0 and cell["all"]["n"] == 3
    assert abs(cell["all"]["delta"] - 50 / 3) < 1e-9
    # the task naming its gold is left out of the no-mention split
    assert found["on"]["no-mention"]["file R@5"]["0"] == {"base": 50.0, "mean": 100.0, "delta": 50.0,
                                                          "low": 50.0, "high": 50.0, "n": 1}
    assert "off" not in found
    text = fold_compare.render(found, "off")
    assert "on: losses beyond noise against off: none" in text


def test_a_fold_whose_whole_interval_is_below_zero_is_named_a_loss():
    base = [entry(c, 2, 1.0) for c in "abcd"]
    worse = [entry(c, 2, 0.0) for c in "abcd"]
    text = fold_compare.render(fold_compare.compare({"off": base, "on": worse}, "off", ("file R@5",)), "off")
    assert "on: losses beyond noise against off: all file R@5 fold 2, all file R@5 fold all" in text


def test_runs_pool_their_variants_only_over_the_same_default_packs(tmp_path, capsys):
    default = [entry("a", 0, 0.5), entry("b", 1, 1.0)]
    first = run(tmp_path / "one.json", default, off=[entry("a", 0, 0.0), entry("b", 1, 0.0)])
    second = run(tmp_path / "two.json", default, wide=[entry("a", 0, 1.0), entry("b", 1, 1.0)])
    out = tmp_path / "found.json"
    assert fold_compare.main([str(first), str(second), "--base", "off", "--metrics", "file R@5",
                              "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    assert set(found) == {"default", "wide"} and found["wide"]["all"]["file R@5"]["all"]["delta"] == 100.0
    other = [dict(entry("a", 0, 0.5), items=[{"id": "z.py"}]), entry("b", 1, 1.0)]
    third = run(tmp_path / "three.json", other, more=default)
    with pytest.raises(SystemExit):
        fold_compare.main([str(first), str(third), "--base", "off"])
    assert "its default packs differ" in capsys.readouterr().err
