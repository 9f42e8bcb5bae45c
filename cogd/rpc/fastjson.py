"""JSON through the C accelerator ``_json``, without importing :mod:`json`.

The hook client runs once per tool use, so its start-up is its latency.
``import json`` costs about 5 ms there: ``json.decoder`` and ``json.scanner``
import ``re``, which imports ``enum``, ``functools`` and ``collections``. The
work itself is done by ``_json`` (C) either way, so this module drives it
directly: :func:`loads` is ``json.loads`` for ``str`` input and :func:`dumps`
is ``json.dumps(obj, ensure_ascii=True, separators=(",", ":"))``, byte for
byte. Where ``_json`` is missing (an interpreter built without it) both fall
back to :mod:`json` itself.

Error paths may still import ``json.decoder``: the C scanner raises its
``JSONDecodeError`` (a ``ValueError``) for malformed documents.
"""

try:
    import _json
except ImportError:  # pragma: no cover — CPython always builds _json
    _json = None

_WHITESPACE = " \t\n\r"  # JSON's insignificant whitespace, exactly
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _unserializable(obj):
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


if _json is not None:
    quote = _json.encode_basestring_ascii  # a str as a JSON string literal, ASCII only

    class _Context:
        """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder`` (its defaults)."""

        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = _CONSTANTS.__getitem__

    _scan = _json.make_scanner(_Context())

    def loads(text: str) -> object:
        """Parse one JSON document (``str``); raises ``ValueError`` as ``json.loads`` would."""
        end = len(text)
        idx = 0
        while idx < end and text[idx] in _WHITESPACE:
            idx += 1
        try:
            value, stop = _scan(text, idx)
        except StopIteration as exc:
            raise ValueError(f"Expecting value: char {exc.value}") from None
        except SystemError:
            # CPython 3.11's scanner raises json.decoder.JSONDecodeError, but looks it up in
            # sys.modules only: before anything imported json.decoder, a malformed object or
            # array ends in "returned NULL without setting an exception". Failure path only:
            # import it and scan again, which raises the real error (a ValueError).
            import json.decoder  # noqa: F401

            value, stop = _scan(text, idx)
        while stop < end and text[stop] in _WHITESPACE:
            stop += 1
        if stop != end:
            raise ValueError(f"Extra data: char {stop}")
        return value

    def dumps(obj: object) -> str:
        """Compact, ASCII-only JSON (lone surrogates survive as ``\\uXXXX`` escapes)."""
        # A fresh encoder per call: it holds the circular-reference markers of one run.
        # (markers, default, encoder, indent, key_separator, item_separator, sort_keys, skipkeys, allow_nan)
        encode = _json.make_encoder({}, _unserializable, quote, None, ":", ",", False, False, True)
        return "".join(encode(obj, 0))

else:  # pragma: no cover
    import json as _json_module

    quote = _json_module.encoder.encode_basestring_ascii

    def loads(text: str) -> object:
        return _json_module.loads(text)

    def dumps(obj: object) -> str:
        return _json_module.dumps(obj, ensure_ascii=True, separators=(",", ":"))

