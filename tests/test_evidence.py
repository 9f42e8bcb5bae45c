"""Evidence-weighted shrinkage of the learned feedback sources (cogd/evidence.py, cogd/retrieve/feedback.py).

The estimator's exact values; a fresh ledger ranks exactly as feedback off; evidence growing
session by session (a real SQLite ledger, a real index of the standard library's ``json`` and
``email`` packages) raises a definition the sessions kept editing, never lowers it; the new
``[rank]`` key is validated.
"""

from __future__ import annotations

import math

import pytest

from cogd.config import ConfigError, PackConfig, RankConfig, RetrieveConfig, load_config
from cogd.evidence import credibility, shrunk_weight, uncovered_share
from cogd.fusion import RRF_K
from cogd.retrieve.feedback import HISTORY_COVERED, LEARNED_SOURCES, Feedback
from cogd.retrieve.lexical import match_expression, query_terms
from cogd.retrieve.pack import prompt_pack, reason_of
from cogd.usage.ledger import Ledger
from cogd.usage.touches import Touch

OFF = RankConfig(utility_weight=0, working_set_weight=0, recency_weight=0, association_weight=0)
PROMPTS = ("the date in an email header is parsed wrong", "decode a JSON document with a custom object hook",
           "encoded words in a header are not folded")
# What the sessions ask (other words than the code's) and what the agent then edits each time.
ASKED = "the timestamp on incoming mail comes out in the wrong zone"


# ---------------------------------------------------------------- the estimator

def test_credibility_is_n_over_n_plus_k():
    assert credibility(0, 10) == 0.0
    assert credibility(10, 10) == 0.5
    assert credibility(90, 10) == 0.9
    assert credibility(1, 3) == 0.25
    assert credibility(5, 0) == 1.0 and credibility(0, 0) == 1.0  # k = 0: shrinkage off
    assert shrunk_weight(0.5, 10, 10) == 0.25
    assert shrunk_weight(0.8, 3, 1) == pytest.approx(0.6, abs=1e-12)
    assert shrunk_weight(0.0, 100, 10) == 0.0
    assert shrunk_weight(1.0, 0, 10) == 0.0


@pytest.mark.parametrize("args", [(-1, 10), (1, -0.5), (math.nan, 1), (1, math.inf), (math.inf, 1)])
def test_credibility_refuses_what_is_not_a_count(args):
    with pytest.raises(ValueError):
        credibility(*args)
    with pytest.raises(ValueError):
        shrunk_weight(0.5, *args)


def test_shrunk_weight_refuses_a_bad_weight():
    for weight in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError):
            shrunk_weight(weight, 1, 1)


def test_feedback_shrinks_only_the_learned_sources():
    config = RankConfig(utility_weight=0.5, association_weight=1.0, recency_weight=0.3, working_set_weight=0.5,
                        evidence_k=10)
    fresh = Feedback(config)
    assert (fresh.weight("utility"), fresh.weight("association")) == (0.0, 0.0)
    assert (fresh.weight("recency"), fresh.weight("working_set")) == (0.3, 0.5)  # not learned across sessions
    grown = Feedback(config, evidence={"utility": 30, "association": 10})
    assert (grown.weight("utility"), grown.weight("association")) == (0.375, 0.5)
    raw = Feedback(RankConfig(utility_weight=0.5, association_weight=1.0, evidence_k=0))
    assert (raw.weight("utility"), raw.weight("association")) == (0.5, 1.0)  # k = 0: as configured
    assert set(LEARNED_SOURCES) == {"utility", "association", "history_association", "co_change"}


def test_history_sources_shrink_by_their_commits():
    config = RankConfig(history_association_weight=0.5, co_change_weight=1.0, history_evidence_k=50)
    fresh = Feedback(config, history=lambda text, _unwanted=None: [], co_changed=lambda seeds: [("a", "b", 1.0, 2)])
    # no commit reachable: history weighs nothing, its sources are not even asked
    assert (fresh.weight("history_association"), fresh.weight("co_change")) == (0.0, 0.0)
    assert fresh.association_lists("anything", 10) == [] and fresh.co_change_edges(["a"]) == []
    grown = Feedback(config, history=lambda text, _unwanted=None: [], co_changed=lambda seeds: [("a", "b", 1.0, 2)],
                     evidence={"history_association": 150, "co_change": 50})
    assert grown.weight("history_association") == 0.375  # 0.5 · 150 / 200
    assert grown.weight("co_change") == 0.5  # 1 · 50 / 100
    assert grown.source_weight("history", 3) == 0.375 and grown.co_change_edges(["a"]) == [("a", "b", 1.0, 2)]
    # the ledger's sessions are no evidence for history, nor commits for the session sources
    assert Feedback(config, evidence={"utility": 10_000}).weight("history_association") == 0.0
    assert Feedback(RankConfig(evidence_k=10), evidence={"history_association": 10_000}).weight("association") == 0.0
    assert Feedback(RankConfig(history_evidence_k=0)).weight("co_change") == RankConfig().co_change_weight  # k = 0: off



def test_uncovered_share_is_k_over_k_plus_history():
    assert uncovered_share(0, 800) == 1.0  # no history: the session source keeps its weight
    assert uncovered_share(800, 800) == 0.5
    assert uncovered_share(150, 50) == 0.25
    assert uncovered_share(3, 1) == 0.25
    assert uncovered_share(1000, 0) == 1.0 and uncovered_share(0, 0) == 1.0  # k = 0: the discount off
    for args in ((-1, 10), (1, -0.5), (math.nan, 1), (1, math.inf)):
        with pytest.raises(ValueError):
            uncovered_share(*args)


def test_session_sources_are_discounted_by_what_history_holds():
    # by the CVs: utility's discount stays; association's double reading is counted per entity instead
    assert (RankConfig().utility_history_k, RankConfig().association_history_k) == (800.0, 0.0)
    assert (RankConfig().same_change_days, RankConfig().association_weight) == (7.0, 0.5)
    assert set(HISTORY_COVERED) == {"utility", "association"}
    config = RankConfig(utility_weight=0.25, association_weight=0.25, evidence_k=10, history_association_weight=0.5,
                        history_evidence_k=50, utility_history_k=200, association_history_k=800)
    evidence = {"utility": 90, "association": 40, "history_association": 600}
    fb = Feedback(config, evidence=evidence)
    # utility 0.25 · 90/100 · 200/800, association 0.25 · 40/50 · 800/1400; history itself unchanged
    assert fb.weight("utility") == pytest.approx(0.05625, abs=1e-12)
    assert fb.weight("association") == pytest.approx(0.2 * 4 / 7, abs=1e-12)
    assert fb.weight("history_association") == pytest.approx(0.5 * 600 / 650, abs=1e-12)
    assert (fb.history_uncovered("utility"), fb.history_uncovered("association")) == (0.25, 800 / 1400)
    # no history mined, or history association off: history covers nothing, the weights are as before
    for covered, off in (({**evidence, "history_association": 0}, config),
                         (evidence, RankConfig(**{**config.__dict__, "history_association_weight": 0.0}))):
        fb = Feedback(off, evidence=covered)
        assert (fb.weight("utility"), fb.weight("association")) == (0.225, 0.2)
    # the keys at 0: no discount however much history there is
    plain = Feedback(RankConfig(utility_weight=0.25, association_weight=0.25, evidence_k=10, utility_history_k=0,
                                association_history_k=0), evidence=evidence)
    assert (plain.weight("utility"), plain.weight("association")) == (0.225, 0.2)


def _two_sources(combine: str) -> Feedback:
    """Session list a, b; history list b, c (b in both), both sources at their full weight."""
    from cogd.history.store import Association

    config = RankConfig(association_weight=0.25, history_association_weight=0.5, evidence_k=0,
                        history_evidence_k=0, association_combine=combine)
    return Feedback(config, associations=lambda text: [("a", 3.0), ("b", 2.0)],
                    history=lambda text, _unwanted=None: [Association("b", 2.0, 2, ["c1", "c2"]), Association("c", 1.0, 1, ["c3"])])


def test_association_sources_pool_by_default():
    assert RankConfig().association_combine == "pooled"  # chosen by the replay's cross-validation
    assert _two_sources("pooled").association_terms("q", 10, RRF_K) == \
        Feedback(RankConfig(association_weight=0.25, history_association_weight=0.5, evidence_k=0,
                            history_evidence_k=0), associations=lambda text: [("a", 3.0), ("b", 2.0)],
                 history=_two_sources("sum").history).association_terms("q", 10, RRF_K)


def test_association_sum_adds_each_source_as_a_list_of_its_own():
    terms, lists = _two_sources("sum").association_terms("q", 10, RRF_K)
    assert [source for source, _ in lists] == ["session", "history"]
    assert terms == pytest.approx({"a": 0.25 / 61, "b": 0.25 / 62 + 0.5 / 61, "c": 0.5 / 62})


def test_association_max_counts_an_entity_both_sources_name_once():
    terms, _ = _two_sources("max").association_terms("q", 10, RRF_K)
    # b: history's 0.5 / 61 alone, not that plus the session's 0.25 / 62
    assert terms == pytest.approx({"a": 0.25 / 61, "b": 0.5 / 61, "c": 0.5 / 62})
    assert sum(terms.values()) < sum(_two_sources("sum").association_terms("q", 10, RRF_K)[0].values())


def test_association_pooled_is_one_list_ordered_by_agreement_at_one_weight():
    terms, _ = _two_sources("pooled").association_terms("q", 10, RRF_K)
    # order by the summed terms: b (both) 0.0121, c 0.0081, a 0.0041; each fused once at 0.5
    assert list(terms) == ["b", "c", "a"]
    assert terms == pytest.approx({"b": 0.5 / 61, "c": 0.5 / 62, "a": 0.5 / 63})


def test_association_combine_with_one_source_is_that_source():
    from cogd.history.store import Association

    for combine in ("sum", "max", "pooled"):
        only = Feedback(RankConfig(history_association_weight=0.5, association_weight=0.0, history_evidence_k=0,
                                   association_combine=combine),
                        associations=lambda text: [("a", 3.0)],
                        history=lambda text, _unwanted=None: [Association("b", 2.0, 2, ["c1"]), Association("c", 1.0, 1, ["c3"])])
        assert only.association_terms("q", 10, RRF_K)[0] == pytest.approx({"b": 0.5 / 61, "c": 0.5 / 62})
    fresh = Feedback(RankConfig(association_combine="pooled"), associations=lambda text: [("a", 3.0)])
    assert fresh.association_terms("q", 10, RRF_K) == ({}, [])  # no evidence yet: nothing learned is fused

def _one_change(days: float, combine: str = "pooled", commit_at: float = 10_000 + 3600,
                session_times: bool = True) -> Feedback:
    """Session list a, b; history list c, b (b second in both); b's session edit at 10,000 s and the
    request of history's that changed b at ``commit_at``; both sources at their full weight."""
    from cogd.history.store import Association

    config = RankConfig(association_weight=0.25, history_association_weight=0.5, evidence_k=0,
                        history_evidence_k=0, association_combine=combine, same_change_days=days)
    return Feedback(config, associations=lambda text: [("a", 3.0), ("b", 2.0)],
                    history=lambda text, _unwanted=None: [Association("c", 2.0, 1, ["c1"], [5_000]),
                                          Association("b", 1.0, 1, ["c2"], [int(commit_at)])],
                    session_times=(lambda ids: {i: [10_000.0] for i in ids if i in ("a", "b")}) if session_times else None)


def test_same_change_counts_one_request_read_twice_once():
    agreed = {"b": 0.5 / 61, "c": 0.5 / 62, "a": 0.5 / 63}  # pooled: b (both, summed 0.0121) first
    assert _one_change(0).association_terms("q", 10, RRF_K)[0] == pytest.approx(agreed)
    assert list(_one_change(0).association_terms("q", 10, RRF_K)[0]) == ["b", "c", "a"]
    # committed an hour after the session: one change, b's order is its larger term 0.5 / 62 < c's 0.5 / 61
    once = _one_change(1)
    terms, lists = once.association_terms("q", 10, RRF_K)
    assert once.same_change(lists) == {"b"}
    assert list(terms) == ["c", "b", "a"]
    assert terms == pytest.approx({"c": 0.5 / 61, "b": 0.5 / 62, "a": 0.5 / 63})
    # either side of the session: a commit time an hour before it (an amend, a clock) is the same change
    amended = _one_change(1, commit_at=10_000 - 3600)
    assert amended.same_change(amended.association_lists("q", 10)) == {"b"}
    # under sum the same entity adds one term, not two
    assert _one_change(1, "sum").association_terms("q", 10, RRF_K)[0] == pytest.approx(
        {"a": 0.25 / 61, "b": 0.5 / 62, "c": 0.5 / 61})
    assert _one_change(0, "sum").association_terms("q", 10, RRF_K)[0] == pytest.approx(
        {"a": 0.25 / 61, "b": 0.25 / 62 + 0.5 / 62, "c": 0.5 / 61})


def test_agreement_outside_the_window_or_without_times_still_sums():
    for feedback in (_one_change(1, commit_at=10_000 + 2 * 86400), _one_change(1, session_times=False),
                     _one_change(3, commit_at=10_000 - 3 * 86400 - 1)):
        terms, lists = feedback.association_terms("q", 10, RRF_K)
        assert feedback.same_change(lists) == set()
        assert list(terms) == ["b", "c", "a"]
    edge = _one_change(3, commit_at=10_000 - 3 * 86400)
    assert edge.same_change(edge.association_lists("q", 10)) == {"b"}  # the window's end is in it


def test_same_change_days_is_validated(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[rank]\nsame_change_days = 2.5\n")
    assert load_config(path).rank.same_change_days == 2.5
    for value, message in (("-1", "non-negative"), ('"a week"', "non-negative number"), ("inf", "finite")):
        path.write_text(f"[rank]\nsame_change_days = {value}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


# ---------------------------------------------------------------- config

@pytest.mark.parametrize("value, message", [("-1", "non-negative"), ("nan", "finite"), ("inf", "finite"),
                                            ('"ten"', "non-negative number")])
def test_evidence_k_is_validated(tmp_path, value, message):
    path = tmp_path / "config.toml"
    path.write_text(f"[rank]\nevidence_k = {value}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_association_combine_is_validated(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[rank]\nassociation_combine = "max"\n')
    assert load_config(path).rank.association_combine == "max"
    path.write_text('[rank]\nassociation_combine = "product"\n')
    with pytest.raises(ConfigError, match="sum, max, pooled, single"):
        load_config(path)


def test_evidence_k_is_read(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[rank]\nevidence_k = 4\nassociation_weight = 0.75\n")
    rank = load_config(path).rank
    assert (rank.evidence_k, rank.association_weight) == (4.0, 0.75)
    assert RankConfig().evidence_k > 0  # shipped on: a new repository starts as feedback off


# ---------------------------------------------------------------- on a real index and ledger


def feedback_of(ledger: Ledger, config: RankConfig, session: str | None = None,
                recent: list[str] | None = None) -> Feedback:
    """The request's feedback as the daemon builds it (cogd/daemon/context_methods.py); ``recent``:
    the recently changed files (git's order), none by default."""
    def associations(text):
        return ledger.associated(match_expression(query_terms(text)), limit=RetrieveConfig().candidates)

    touches = ledger.session_touches(session) if session else []
    return Feedback(config, ledger.utility, touches, recent or [], associations,
                    session_times=ledger.association_times, evidence=ledger.evidence_sessions())


def ranked(stdlib_index, prompt: str, feedback: Feedback) -> list[tuple[str, float]]:
    root, conn = stdlib_index
    pack = prompt_pack(conn, root, prompt, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback)
    return [(i.entity_id, i.score) for i in pack.items]


def test_a_fresh_ledger_ranks_exactly_as_feedback_off(stdlib_index, tmp_path):
    root, conn = stdlib_index
    # a freshly cloned repository: every file is in its one commit, so every file is "recent"
    recent = [r[0] for r in conn.execute("SELECT path FROM files ORDER BY path")]
    ledger = Ledger(tmp_path / "state.db")
    try:
        assert ledger.evidence_sessions() == {"utility": 0, "association": 0}
        for prompt in PROMPTS:
            off = ranked(stdlib_index, prompt, feedback_of(ledger, OFF, recent=recent))
            assert len(off) >= 5
            assert ranked(stdlib_index, prompt, feedback_of(ledger, RankConfig(), recent=recent)) == off
        # what the defaults hold back: the same fresh ledger without shrinkage is still off (no
        # evidence at all), but recency at its old 0.3 would already reorder the packs
        moved = RankConfig(recency_weight=0.3)
        assert any(ranked(stdlib_index, p, feedback_of(ledger, moved, recent=recent))
                   != ranked(stdlib_index, p, feedback_of(ledger, OFF, recent=recent)) for p in PROMPTS)
    finally:
        ledger.close()


def session(ledger: Ledger, stdlib_index, n: int, target: tuple[str, str, int, int]) -> None:
    """One earlier session: the prompt ASKED gets its pack, the agent edits ``target``, the session ends."""
    root, conn = stdlib_index
    sid = f"s{n}"
    now = 1_700_000_000.0 + 100 * n
    pack = prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25",
                       feedback=feedback_of(ledger, RankConfig(), sid))
    ledger.record_delivery(sid, "prompt", "", ASKED, pack.text, [i.as_dict() for i in pack.items], now=now)
    entity_id, path, start, end = target
    ledger.record_tool_use(sid, "Edit", f"t{n}", [Touch(path, "edit", start, end)], now=now + 5)
    assert ledger.associate(sid, [(entity_id, path)], now=now + 5) == 1
    ledger.end_session(sid, "other", now=now + 10)


def low_target(stdlib_index, ledger) -> tuple[list[str], tuple[str, str, int, int]]:
    """``(the plain ranking's ids, (id, path, start, end) of its last item)``: the sessions' target,
    a definition the ranking without feedback puts low in the pack."""
    _root, conn = stdlib_index
    off = [e for e, _ in ranked(stdlib_index, ASKED, feedback_of(ledger, OFF))]
    row = conn.execute("SELECT path, start_line, end_line FROM entities WHERE id = ?", (off[-1],)).fetchone()
    return off, (off[-1], row[0], row[1], row[2])


def test_evidence_growing_raises_what_sessions_kept_editing(stdlib_index, tmp_path):
    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        off, target = low_target(stdlib_index, ledger)
        target_id = target[0]
        k = RankConfig().evidence_k
        positions, association_weights = [off.index(target_id)], []
        for n in range(1, 9):
            session(ledger, stdlib_index, n, target)
            evidence = ledger.evidence_sessions()
            assert evidence == {"utility": n, "association": n}  # one independent session each time
            feedback = feedback_of(ledger, RankConfig())
            assert feedback.weight("association") == pytest.approx(RankConfig().association_weight * n / (n + k))
            association_weights.append(feedback.weight("association"))
            root_, conn_ = stdlib_index
            hits = [h for h in prompt_pack(conn_, root_, ASKED, PackConfig(), RetrieveConfig(), mode="bm25",
                                           feedback=feedback).items]
            ids = [h.entity_id for h in hits]
            assert target_id in ids
            positions.append(ids.index(target_id))
            item = hits[ids.index(target_id)]
            assert item.signals["association_rank"] == 1
        assert association_weights == sorted(association_weights) and len(set(association_weights)) == 8
        assert positions == sorted(positions, reverse=True)  # never lower than the session before
        assert positions[-1] < positions[0]  # and it did rise
        # the first session's evidence counted 1/(1 + k) of the association weight, not all of it
        assert association_weights[0] == pytest.approx(RankConfig().association_weight / (1 + k))
    finally:
        ledger.close()



def one_session_on_a_low_target(stdlib_index, ledger) -> tuple[str, list]:
    """One session edits the low target; returns its id and its hits in a pack with feedback off."""
    root, conn = stdlib_index
    _off, target = low_target(stdlib_index, ledger)
    session(ledger, stdlib_index, 1, target)
    plain = [h for h in prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25",
                                    feedback=feedback_of(ledger, OFF)).items if h.entity_id == target[0]]
    return target[0], plain

def test_one_session_moves_the_fusion_by_the_shrunk_weight_only(stdlib_index, tmp_path):
    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        target_id, plain = one_session_on_a_low_target(stdlib_index, ledger)
        config = RankConfig(utility_weight=0, recency_weight=0, working_set_weight=0)
        shrunk = [h for h in prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25",
                                         feedback=feedback_of(ledger, config)).items if h.entity_id == target_id]
        w = config.association_weight / (1 + config.evidence_k)
        # the association list ranks the target first: RRF adds w / (k_rrf + 1) to its fused score (plain:
        # the target came by expansion alone, no list of its own)
        assert shrunk[0].signals["rrf"] == pytest.approx(plain[0].signals.get("rrf", 0.0) + w / (RRF_K + 1), abs=2e-5)
    finally:
        ledger.close()


def test_an_edit_both_the_ledger_and_history_hold_is_fused_once_unless_summed(stdlib_index, tmp_path):
    """One session edited the target and its work was committed: the ledger and history both name
    it first. ``sum`` adds both sources' terms to its fused score; ``max`` and ``pooled`` one."""
    from cogd.history.store import Association

    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        target_id, plain = one_session_on_a_low_target(stdlib_index, ledger)
        before = plain[0].signals.get("rrf", 0.0)
        rrf = {}
        for combine in ("sum", "max", "pooled"):
            config = RankConfig(utility_weight=0, recency_weight=0, working_set_weight=0, evidence_k=0,
                                history_evidence_k=0, association_combine=combine)
            feedback = feedback_of(ledger, config)
            feedback.history = lambda text, _unwanted=None: [Association(target_id, 1.0, 1, ["c1"])]  # the same edit, committed
            items = prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback).items
            hit = next(h for h in items if h.entity_id == target_id)
            assert (hit.signals["association_rank"], hit.signals["history_rank"]) == (1, 1)
            rrf[combine] = hit.signals["rrf"] - before
        w_session, w_history = RankConfig().association_weight, RankConfig().history_association_weight
        assert rrf["sum"] == pytest.approx((w_session + w_history) / (RRF_K + 1), abs=2e-5)
        assert rrf["max"] == pytest.approx(max(w_session, w_history) / (RRF_K + 1), abs=2e-5)
        assert rrf["pooled"] == pytest.approx(rrf["max"], abs=2e-5)
    finally:
        ledger.close()


def test_a_session_committed_within_the_window_is_fused_once_even_under_sum(stdlib_index, tmp_path):
    """One session edited the target (the ledger records when); history names it for a request
    committed ten minutes later (the same change) or a month later (another change)."""
    from cogd.history.store import Association

    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        target_id, plain = one_session_on_a_low_target(stdlib_index, ledger)
        edited_at = 1_700_000_000.0 + 100 + 5  # session 1's edit (:func:`session`)
        assert ledger.association_times([target_id, "json/nothing.py::f"]) == {target_id: [edited_at]}
        before = plain[0].signals.get("rrf", 0.0)
        rrf = {}
        for label, committed in (("same", edited_at + 600), ("later", edited_at + 30 * 86400)):
            config = RankConfig(utility_weight=0, recency_weight=0, working_set_weight=0, evidence_k=0,
                                history_evidence_k=0, association_combine="sum", same_change_days=7)
            feedback = feedback_of(ledger, config)
            feedback.history = lambda text, _unwanted=None, t=committed: [Association(target_id, 1.0, 1, ["c1"], [int(t)])]
            items = prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback).items
            hit = next(h for h in items if h.entity_id == target_id)
            assert (hit.signals["association_rank"], hit.signals["history_rank"]) == (1, 1)
            assert hit.signals.get("same_change") == (1 if label == "same" else None)  # for --explain
            rrf[label] = hit.signals["rrf"] - before
        w_session, w_history = RankConfig().association_weight, RankConfig().history_association_weight
        assert rrf["same"] == pytest.approx(max(w_session, w_history) / (RRF_K + 1), abs=2e-5)
        assert rrf["later"] == pytest.approx((w_session + w_history) / (RRF_K + 1), abs=2e-5)
    finally:
        ledger.close()


def three_sessions_on_a_low_target(stdlib_index, ledger) -> tuple[str, str, int, int]:
    """Three earlier sessions edit the low target (:func:`low_target`); returns it."""
    _off, target = low_target(stdlib_index, ledger)
    for n in (1, 2, 3):
        session(ledger, stdlib_index, n, target)
    return target


def test_with_no_history_the_history_discount_leaves_the_ranking_unchanged(stdlib_index, tmp_path):
    """Three sessions edited the low target: with no history evidence (none mined, or history
    association off) the discount keys change no pack; with history's evidence they lower the
    session sources' weights and so the target's fused score, by exactly the discounted weights."""
    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        target = three_sessions_on_a_low_target(stdlib_index, ledger)
        discounted = RankConfig(utility_history_k=50, association_history_k=50)

        def pack(config: RankConfig, history_commits: int) -> list:
            feedback = feedback_of(ledger, config)
            feedback.evidence["history_association"] = history_commits
            return prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback).items

        undiscounted = RankConfig(utility_history_k=0, association_history_k=0)
        assert [(i.entity_id, i.score) for i in pack(discounted, 0)] == \
            [(i.entity_id, i.score) for i in pack(undiscounted, 0)]
        assert [(i.entity_id, i.score) for i in pack(RankConfig(), 0)] == \
            [(i.entity_id, i.score) for i in pack(undiscounted, 0)]  # the defaults (800) too
        history_off = RankConfig(utility_history_k=50, association_history_k=50, history_association_weight=0)
        assert [(i.entity_id, i.score) for i in pack(history_off, 150)] == \
            [(i.entity_id, i.score) for i in pack(RankConfig(history_association_weight=0), 150)]
        plain = next(i for i in pack(RankConfig(utility_weight=0, association_history_k=0), 150)
                     if i.entity_id == target[0])
        cut = next(i for i in pack(RankConfig(utility_weight=0, association_history_k=50), 150)
                   if i.entity_id == target[0])
        w = RankConfig().association_weight * 3 / (3 + RankConfig().evidence_k)
        # the association list ranks the target first: its RRF term falls from w/(k+1) to w·¼/(k+1)
        assert plain.signals["rrf"] - cut.signals["rrf"] == pytest.approx(w * (1 - 50 / 200) / (RRF_K + 1), abs=2e-5)
    finally:
        ledger.close()


def test_utility_once_leaves_out_the_boost_history_already_counts(stdlib_index, tmp_path):
    """Three sessions edited the low target and their work was committed (history's list names it).
    ``utility_with_history = "once"`` drops the target's utility boost and nothing else; with no
    history list the ranking is that of ``"both"``."""
    from cogd.history.store import Association

    root, conn = stdlib_index
    ledger = Ledger(tmp_path / "state.db")
    try:
        target = three_sessions_on_a_low_target(stdlib_index, ledger)

        def pack(mode: str, committed: bool) -> dict:
            feedback = feedback_of(ledger, RankConfig(utility_with_history=mode))
            if committed:
                feedback.history = lambda text, _unwanted=None: [Association(target[0], 1.0, 3, ["c1", "c2", "c3"])]
                feedback.evidence["history_association"] = 150
            items = prompt_pack(conn, root, ASKED, PackConfig(), RetrieveConfig(), mode="bm25", feedback=feedback).items
            return {i.entity_id: i for i in items}

        both, once = pack("both", True), pack("once", True)
        boost = both[target[0]].signals["utility_x"]
        assert boost > 1.0
        assert "utility_x" not in once[target[0]].signals and once[target[0]].signals["utility_in_history"] == boost
        assert f"utility ×{boost} left out" in reason_of(once[target[0]].signals)
        assert both[target[0]].signals["rrf"] == once[target[0]].signals["rrf"]  # fusion untouched
        # everything else keeps its utility factor: no other item is named by history
        assert {e: i.signals.get("utility_x") for e, i in both.items() if e != target[0] and e in once} == \
            {e: i.signals.get("utility_x") for e, i in once.items() if e != target[0] and e in both}
        assert [(e, i.score) for e, i in pack("once", False).items()] == \
            [(e, i.score) for e, i in pack("both", False).items()]
    finally:
        ledger.close()


def test_utility_with_history_is_validated(tmp_path):
    assert RankConfig().utility_with_history == "both"
    path = tmp_path / "config.toml"
    path.write_text('[rank]\nutility_with_history = "once"\nutility_history_k = 200\n')
    rank = load_config(path).rank
    assert (rank.utility_with_history, rank.utility_history_k) == ("once", 200.0)
    path.write_text('[rank]\nutility_with_history = "twice"\n')
    with pytest.raises(ConfigError, match="both, once"):
        load_config(path)
    path.write_text("[rank]\nassociation_history_k = -1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        load_config(path)


def test_history_file_evidence_is_shrunk_with_the_history_source():
    from cogd.history.store import Association

    found = [Association("a.py::f", 3.0, 2, ["c1", "c2"]), Association("a.py::g", 1.0, 1, ["c1"]),
             Association("b.py::h", 2.0, 1, ["c3"])]
    config = RankConfig(history_association_weight=0.5, history_file_weight=1.0, history_evidence_k=50)
    feedback = Feedback(config, history=lambda text, _unwanted=None: found, evidence={"history_association": 150})
    assert feedback.history_file_shares() == {}  # nothing asked yet for this request
    assert [source for source, _ in feedback.association_lists("q", 10)] == ["history"]
    # per file: the sum of its entities' scores over the best file's (a 4, b 2), × Z = 150 / 200
    assert feedback.history_file_shares() == {"a.py": 0.75, "b.py": 0.375}
    assert Feedback(RankConfig(history_file_weight=1.0), history=lambda text, _unwanted=None: found).history_file_shares() == {}
    off = Feedback(RankConfig(history_file_weight=0.0), history=lambda text, _unwanted=None: found, evidence={"history_association": 150})
    off.association_lists("q", 10)
    assert off.history_file_shares() == {}


def test_history_is_told_to_leave_test_edits_out_only_when_the_request_does_not_want_tests():
    from cogd.history.store import Association
    from cogd.retrieve.hybrid import _fuse_learned, is_test_path

    asked: list = []

    def history(text, tests_unwanted=None):
        asked.append(tests_unwanted)
        return [Association("src/a.py::f", 2.0, 1, ["c1"]), Association("tests/test_a.py::test_f", 1.0, 1, ["c1"])]

    feedback = Feedback(RankConfig(history_evidence_k=0), history=history)
    for tests_ok, expected in ((False, is_test_path), (True, None)):
        fused: dict[str, float] = {}
        _fuse_learned(feedback, "fix f", RetrieveConfig(), fused, {}, tests_ok)
        assert asked.pop() is expected
        assert set(fused) == {"src/a.py::f", "tests/test_a.py::test_f"}  # the source answers; nothing filtered here
