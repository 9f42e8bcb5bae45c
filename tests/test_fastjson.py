"""cogd.rpc.fastjson (the hook path's JSON, straight through ``_json``) agrees with :mod:`json`."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cogd.rpc import fastjson
from cogd.rpc.protocol import encode

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


def test_malformed_object_is_a_value_error_before_json_is_imported():
    """In a fresh interpreter (json.decoder not imported, as in the hook) a malformed object
    or array raises ValueError with the scanner's message, not SystemError."""
    code = ("import sys\nfrom cogd.rpc.fastjson import loads\nassert 'json.decoder' not in sys.modules\n"
            "for text in ('{not json', '[1 2]', '{\"a\" 1}'):\n"
            "    try:\n        loads(text)\n    except ValueError as exc:\n        print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines() == [
        "JSONDecodeError Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "JSONDecodeError Expecting ',' delimiter: line 1 column 4 (char 3)",
        "JSONDecodeError Expecting ':' delimiter: line 1 column 6 (char 5)",
    ]
