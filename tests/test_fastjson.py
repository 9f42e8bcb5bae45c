"""cogd.fastjson (the hook path's JSON, straight through ``_json``) agrees with :mod:`json`."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cogd import fastjson
from cogd.daemon.protocol import encode

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
                         max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_dumps_is_the_protocols_encoding(doc):
    assert (fastjson.dumps(doc) + "\n").encode("ascii") == encode(doc)


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from(["", " ", "\n", " \t\r\n "]))
def test_loads_round_trips_like_json(doc, pad):
    text = pad + json.dumps(doc, ensure_ascii=False) + pad
    assert json.dumps(fastjson.loads(text)) == json.dumps(json.loads(text))


def test_constants_and_quote():
    assert math.isnan(fastjson.loads("NaN")) and fastjson.loads("[-Infinity]") == [float("-inf")]
    assert fastjson.quote("caf\u00e9 \"\\\n\ud800") == json.dumps("caf\u00e9 \"\\\n\ud800")


@pytest.mark.parametrize("bad", ["", "   ", "{not json", "[1, 2", '"open', "{} {}", "[1,]", '{"a": 1,}',
                                 '"\x01"', "\ufeff{}", "01", "{'a': 1}"])
def test_loads_rejects_what_json_rejects(bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        fastjson.loads(bad)


def test_dumps_refuses_what_json_refuses():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        fastjson.dumps(loop)
    with pytest.raises(TypeError):
        fastjson.dumps({"x": object()})
