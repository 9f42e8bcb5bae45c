"""Reciprocal rank fusion and the retrieval modes: one definition, used by code and memory retrieval."""

from __future__ import annotations

import pytest

from cogd.config import ConfigError, load_config
from cogd.fusion import MODES, RRF_K, describe_modes, reciprocal_rank_fusion


def test_rrf_scores_by_the_formula():
    fused = reciprocal_rank_fusion([(1.0, ["a", "b", "c"]), (1.0, ["c", "a"])])
    assert fused == {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61}
    assert list(fused) == ["a", "b", "c"]  # first seen first
    assert sorted(fused, key=fused.get, reverse=True) == ["a", "c", "b"]


def test_rrf_weights_k_and_adding_a_list_later():
    fused = reciprocal_rank_fusion([(2.0, ["x"]), (0.5, ["y", "x"])], k=10)
    assert fused == {"x": 2.0 / 11 + 0.5 / 12, "y": 0.5 / 11}
    same = reciprocal_rank_fusion([(0.25, ["z", "y"])], k=10, into=fused)
    assert same is fused and fused == {"x": 2.0 / 11 + 0.5 / 12, "y": 0.5 / 11 + 0.25 / 12, "z": 0.25 / 11}


def test_rrf_of_nothing_is_empty():
    assert reciprocal_rank_fusion([]) == {} and reciprocal_rank_fusion([(1.0, [])]) == {}
    assert RRF_K == 60


def test_modes_are_one_list(tmp_path):
    assert MODES == ("bm25", "vector", "hybrid") and describe_modes() == "bm25, vector or hybrid"
    config = tmp_path / "config.toml"
    for mode in MODES:
        config.write_text(f'[retrieve]\nmode = "{mode}"\n')
        assert load_config(config).retrieve.mode == mode
    config.write_text('[retrieve]\nmode = "fuzzy"\n')
    with pytest.raises(ConfigError, match="retrieve.mode must be bm25, vector or hybrid, got 'fuzzy'"):
        load_config(config)
