"""The replay's fold cross-validation (scripts/_replay_cv.py, ``replay_sessions.py --cv``).

Per-session records shaped like the replay's (``commit``, ``metrics``) over a stream whose
tasks carry the development set's ``fold`` field. The point: a held-out fold never takes part
in its own weight choice, and the per-fold verdicts are computed over that fold's tasks only.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import _replay_cv as cv  # noqa: E402
import replay_sessions  # noqa: E402
from _replay_tree import render_config  # noqa: E402


def records(values: dict[str, tuple[float, float]]) -> list[dict]:
    """Replay records: ``{commit: (fn R, fn MRR)}``; file R@5 = fn R."""
    return [{"commit": c, "metrics": {"fn_R": r, "fn_MRR": m, "file_R@5": r}} for c, (r, m) in values.items()]


@pytest.fixture
def stream():
    """40 tasks, 8 per fold (fold = n % 5, as the development set spreads them)."""
    commits = [f"c{n:02d}" for n in range(40)]
    folds = {c: n % 5 for n, c in enumerate(commits)}
    return commits, folds


def test_a_fold_that_favours_a_candidate_does_not_choose_it_for_itself(stream):
    commits, folds = stream
    off = records({c: (0.5, 0.5) for c in commits})
    plain = records({c: (0.6, 0.5) for c in commits})  # better everywhere, a little
    for fold in cv.FOLDS:
        # "lucky" is far better on this fold's tasks only and worse on the others
        lucky = records({c: ((1.0, 1.0) if folds[c] == fold else (0.55, 0.5)) for c in commits})
        arms = {"off": off, "plain": plain, "lucky": lucky}
        chosen, training = cv.choose(arms, folds, fold)
        held = {c for c, f in folds.items() if f == fold}
        assert training == set(commits) - held and not (training & held)
        assert chosen == "plain"  # lucky's own fold cannot vote for it
        other = (fold + 1) % 5
        assert cv.choose(arms, folds, other)[0] == "lucky"  # where its good fold is training data, it wins


def test_choice_ignores_the_held_out_folds_scores(stream):
    commits, folds = stream
    base = {"off": records({c: (0.5, 0.5) for c in commits}), "a": records({c: (0.6, 0.6) for c in commits}),
            "b": records({c: (0.58, 0.58) for c in commits})}
    for fold in cv.FOLDS:
        changed = {name: [dict(r, metrics=dict(r["metrics"])) for r in recs] for name, recs in base.items()}
        for r in changed["b"]:  # rewrite b's scores on the held-out fold only: the choice must not move
            if folds[r["commit"]] == fold:
                r["metrics"].update(fn_R=1.0, fn_MRR=1.0)
        assert cv.choose(changed, folds, fold) == cv.choose(base, folds, fold)


def test_cross_validate_judges_each_fold_on_its_own_tasks(stream):
    commits, folds = stream
    off = records({c: (0.5, 0.4) for c in commits})
    # "on" gains 0.1 fn R on every task, and loses 0.2 MRR on every task of fold 3
    on = records({c: (0.6, 0.2 if folds[c] == 3 else 0.4) for c in commits})
    result = cv.cross_validate({"off": off, "on": on}, folds, fixed="on")
    assert [r["fold"] for r in result["folds"]] == [0, 1, 2, 3, 4]
    for row in result["folds"]:
        assert row["tasks"] == 8 and row["training_tasks"] == 32
        assert row["fn_R"]["delta"] == pytest.approx(10.0) and row["fn_R"]["ci"] == pytest.approx((10.0, 10.0))
        assert row["fn_R"]["sign_p"] == pytest.approx(2 / 2 ** 8)  # 8 wins of 8
        assert not row["fn_R"]["loses"]
        lost = row["fold"] == 3
        assert row["fn_MRR"]["delta"] == pytest.approx(-20.0 if lost else 0.0)
        assert row["fn_MRR"]["loses"] is lost
    assert result["passes"] is False
    assert result["spread"]["fn_MRR"]["min"] == pytest.approx(-20.0)
    assert result["spread"]["fn_R"]["sd"] == pytest.approx(0.0)
    with pytest.raises(ValueError):
        cv.cross_validate({"on": on}, folds)


def test_noise_bootstrap_and_sign_test():
    assert cv.sign_test([1, 1, 1, 1, 1]) == pytest.approx(0.0625)
    assert cv.sign_test([1, -1, 0, 0]) == 1.0
    assert cv.sign_test([0, 0]) == 1.0
    assert cv.sign_test([1] * 9 + [-1]) == pytest.approx(2 * 11 / 1024)
    lo, hi = cv.bootstrap_interval([0.1] * 10, "s")
    assert (lo, hi) == pytest.approx((0.1, 0.1))
    lo, hi = cv.bootstrap_interval([-1.0, 1.0] * 20, "s")
    assert lo < 0 < hi  # a mixed fold is noise, not a loss
    assert cv.bootstrap_interval([-1.0, 1.0] * 20, "s") == (lo, hi)  # seeded: reproducible


def test_candidate_specs(tmp_path):
    assert replay_sessions.parse_candidate("utility_weight=0.5,association_weight=1,recency_weight=0,evidence_k=10") \
        == ("u0.5_a1_r0_k10", {"utility_weight": "0.5", "association_weight": "1", "recency_weight": "0",
                               "evidence_k": "10"})
    # a word key is written as a TOML string, named by its word; the config reads it back
    name, rank = replay_sessions.parse_candidate("history_association_weight=0.25,association_combine=max")
    assert (name, rank) == ("h0.25_acmax", {"history_association_weight": "0.25", "association_combine": '"max"'})
    assert tomllib.loads(render_config({"rank": rank}, []))["rank"]["association_combine"] == "max"
    assert replay_sessions.parse_candidate("same_change_days=7,association_history_k=0") == (
        "ahk0_scd7", {"same_change_days": "7", "association_history_k": "0"})
    # history's keys are candidates too, written to [history] while the rest stays in [rank]
    name, values = replay_sessions.parse_candidate("request_decay=1,min_match_share=0.5,co_change_weight=0")
    assert (name, values) == ("c0_rd1_mm0.5", {"request_decay": "1", "min_match_share": "0.5", "co_change_weight": "0"})
    written = tomllib.loads(replay_sessions.write_config(tmp_path, name, "bm25", [], values))
    assert written["history"] == {"request_decay": 1, "min_match_share": 0.5}
    assert written["rank"] == {"co_change_weight": 0}
    # a word key of [history]: test_changes
    name, values = replay_sessions.parse_candidate("test_changes=wanted,min_match_share=0.5")
    assert name == "mm0.5_tcwanted"
    written = tomllib.loads(replay_sessions.write_config(tmp_path, name, "bm25", [], values))
    assert written["history"] == {"min_match_share": 0.5, "test_changes": "wanted"}
    with pytest.raises(ValueError):
        replay_sessions.parse_candidate("test_changes=never")
    # document expansion and the request order are [history] keys too
    name, values = replay_sessions.parse_candidate("name_weight=0.5,request_order=named")
    assert name == "nw0.5_ronamed"
    written = tomllib.loads(replay_sessions.write_config(tmp_path, name, "bm25", [], values))
    assert written["history"] == {"name_weight": 0.5, "request_order": "named"}
    with pytest.raises(ValueError):
        replay_sessions.parse_candidate("request_order=shuffled")
    # history's reach: the requests read, the places per request, the list's length, a pull
    # request's members ([history]); the file prior's weight and files ([rank])
    name, values = replay_sessions.parse_candidate(
        "association_commits=30,per_commit=10,max_associations=40,request_members=all,history_file_prior=0.5")
    assert name == "hc30_pc10_ma40_rmall_hfp0.5"
    written = tomllib.loads(replay_sessions.write_config(tmp_path, name, "bm25", [], values))
    assert written["history"] == {"association_commits": 30, "per_commit": 10, "max_associations": 40,
                                  "request_members": "all"}
    assert written["rank"] == {"history_file_prior": 0.5}
    with pytest.raises(ValueError):
        replay_sessions.parse_candidate("request_members=some")
    for bad in ("utility_weight", "bm25_weight=1", "evidence_k=-1", "evidence_k=inf", "", "association_combine=1",
                "association_combine=product"):
        with pytest.raises(ValueError):
            replay_sessions.parse_candidate(bad)


def test_arms_of_another_run_are_chosen_and_judged_against_that_runs_off(stream):
    commits, folds = stream
    off1 = records({c: (0.5, 0.5) for c in commits})
    off2 = records({c: (0.4, 0.4) for c in commits})  # the second run's off came out lower (replay noise)
    y = records({c: (0.55, 0.5) for c in commits})  # run 1: +0.05 over its off
    x = records({c: (0.5, 0.5) for c in commits})  # run 2: +0.2 over its off, equal to off1 in absolute terms
    arms, baselines = {"off": off1, "y": y, "x": x}, {"y": off1, "x": off2}
    assert cv.choose(arms, folds, 0, baselines)[0] == "x"
    assert cv.choose(arms, folds, 0)[0] == "y"  # without its own baseline x would look like off
    result = cv.cross_validate(arms, folds, fixed="x", baselines=baselines)
    assert all(r["fn_R"]["delta"] == pytest.approx(10.0) and r["fn_MRR"]["delta"] == pytest.approx(10.0)
               for r in result["folds"])
    assert result["all_folds_choice"] == "x" and result["passes"]


def test_a_lost_pack_leaves_its_task_out_of_the_pairs(stream):
    commits, folds = stream
    off = records({c: (0.5, 0.5) for c in commits})
    on = records({c: (0.5, 0.5) for c in commits})
    for r in off + on:
        r["pack"] = {"items": [{"id": "x"}], "hook_chars": 100}
    on[0]["metrics"].update(fn_R=0.0, fn_MRR=0.0)
    on[0]["pack"] = {"items": [], "hook_chars": 3967}  # the hook printed a pack the replay found no delivery for
    assert cv.lost(on[0]) and not cv.lost(off[0])
    row = cv.cross_validate({"off": off, "on": on}, folds, fixed="on")["folds"][0]
    assert (row["fn_R"]["n"], row["fn_R"]["delta"]) == (7, 0.0)  # c00 (fold 0) is out, not a loss of 0.5
    assert cv.objective(on, set(commits), off) == 0.0


def test_the_worst_fold_rule_passes_over_a_candidate_carried_by_one_fold(stream):
    commits, folds = stream
    off = records({c: (0.5, 0.5) for c in commits})
    steady = records({c: (0.55, 0.5) for c in commits})  # +0.05 on every fold
    # +0.6 on fold 1, -0.1 on folds 0, 2, 3, 4: the best mean, the worst weakest fold
    spiky = records({c: ((0.8, 0.8) if folds[c] == 1 else (0.45, 0.45)) for c in commits})
    arms = {"off": off, "steady": steady, "spiky": spiky}
    assert cv.choose(arms, folds, 0, rule="mean")[0] == "spiky"
    assert cv.choose(arms, folds, 0, rule="worst")[0] == "steady"
    assert cv.score(spiky, set(commits), off, folds, "worst") == pytest.approx(-0.1)
    with pytest.raises(ValueError):
        cv.score(spiky, set(commits), off, folds, "median")


def test_the_cross_validation_can_judge_on_the_functions_own_entities(stream):
    commits, folds = stream
    tasks = [{"commit": c, "fold": folds[c]} for c in commits]

    def arm(name: str, rule: float, entity: float) -> dict:
        return {"arm": name, "error": None, "records": [
            {"commit": c, "metrics": {"fn_R": rule, "fn_R_entity": entity, "fn_MRR": 0.5, "file_R@5": 0.5}}
            for c in commits]}

    # "placed" gains by the file rule only (file entities credited with their functions), "real"
    # by the functions' own entities
    results = [arm("off", 0.5, 0.5), arm("placed", 0.9, 0.5), arm("real", 0.6, 0.6)]
    _text, by_rule = replay_sessions.cv_section(results, tasks)
    _text, by_entity = replay_sessions.cv_section(results, tasks, "fn_R_entity")
    assert by_rule["chosen_mean"]["all_folds_choice"] == "placed"
    assert by_entity["chosen_mean"]["all_folds_choice"] == "real"
    assert "recall: fn_R_entity" in _text
    assert results[1]["records"][0]["metrics"]["fn_R"] == 0.9  # the records themselves are left as they were
    with pytest.raises(ValueError):
        replay_sessions.cv_section(results, tasks, "file_R")
