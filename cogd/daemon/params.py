"""Validation of the daemon's request parameters: one policy for every method.

Every payload from a client is untrusted. The policy: a parameter of the wrong
type, or outside its limit, is **rejected** with a ``bad_request``
:class:`~cogd.rpc.protocol.RpcError` (JSON-RPC code ``INVALID_PARAMS``) whose
message names the parameter and the limit; nothing is cut short silently. The
one deliberate cut is :func:`ledger_text`: short client labels the ledger keeps
(session ids, tool names, reasons) are masked for secrets and cut to a fixed
width, because a hook's label must never cost the agent its context pack.

Strings that pass are made safe for SQLite (lone surrogates replaced).
"""

from __future__ import annotations

import time

from cogd.rpc.protocol import INVALID_PARAMS, RpcError
from cogd.secrets import mask as mask_secrets

# The string limits, in characters, each named for what it limits.
PROMPT_MAX = 2_000_000  # a prompt or a search query (about 500,000 tokens, past any model's window)
MEMORY_TEXT_MAX = 200_000  # any string parameter of a memory.* method (the store caps a body lower: memory/api.py)
ID_MAX = 10_000  # an entity or memory id (an entity id is a path, at most 4,096, plus a qualified name)
SESSION_ID_MAX = 200

LIMIT_MAX = 100_000  # items: the default highest ``limit`` of a listing (memory.list, memory.events, memory.search)


def invalid(name: str, message: str) -> RpcError:
    """The ``bad_request`` error for parameter ``name``; ``message`` says what it must be."""
    return RpcError("bad_request", f"{name} {message}", INVALID_PARAMS)


def _safe(value: str) -> str:
    return value.encode("utf-8", errors="replace").decode("utf-8")


def text(params: dict, name: str, *, required: bool = False, limit: int = PROMPT_MAX) -> str | None:
    """``params[name]`` as a string of at most ``limit`` characters, or None when absent.

    Raises :func:`invalid` when it is absent and ``required``, not a string, or longer than ``limit``.
    """
    value = params.get(name)
    if value is None:
        if required:
            raise invalid(name, "is required")
        return None
    if not isinstance(value, str):
        raise invalid(name, "must be a string")
    if len(value) > limit:
        raise invalid(name, f"is longer than {limit} characters")
    return _safe(value)


ENTITY_ID = ("entity id", "json/decoder.py::JSONDecoder.decode")  # (what, example) for identifier()
MEMORY_ID = ("memory id", "01ARZ3NDEKTSV4RRFFQ69G5FAV")


def identifier(params: dict, kind: tuple[str, str], name: str = "id") -> str:
    """``params[name]`` as a non-empty id of at most ID_MAX characters (whether it exists is the callee's to say).

    ``kind``: :data:`ENTITY_ID` or :data:`MEMORY_ID`, ``(what, example)`` for the message.
    Raises :func:`invalid` when it is absent, empty, not a string or too long.
    """
    value = text(params, name, limit=ID_MAX)
    if not value:
        what, example = kind
        raise invalid(name, f"must be a non-empty {what} such as {example!r}")
    return value


def limit(params: dict, default: int | None, high: int = LIMIT_MAX, name: str = "limit") -> int | None:
    """``params[name]``: how many items an answer may hold, an integer in ``1..high`` (``default`` when absent)."""
    return integer(params, name, default, 1, high)


def ledger_text(params: dict, name: str, keep: int) -> str:
    """A short client label as the ledger keeps it (``""`` when absent): the deliberate cut.

    Secrets are masked *before* the cut to ``keep`` characters (a token cut short is no
    longer recognised, and its head would be stored). Raises :func:`invalid` when the
    value is present but not a string.
    """
    value = params.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(name, "must be a string")
    return mask_secrets(_safe(value[:keep + 4096]))[:keep]


def session_id(params: dict) -> str:
    """The session id as the ledger keeps it (``unknown`` when absent).

    Masked here, once, so that the ledger's reads and writes of a session agree.
    """
    return ledger_text(params, "session_id", SESSION_ID_MAX) or "unknown"


def integer(params: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    """``params[name]`` as an integer in ``low..high`` (``default`` when absent or null)."""
    value = params.get(name)
    if value is None:
        return default
    if type(value) is not int or not low <= value <= high:
        raise invalid(name, f"must be an integer in {low}..{high}")
    return value


def seconds(params: dict, default: float, limit: float = 3600.0, name: str = "timeout_s") -> float:
    """``params[name]`` as seconds in (0, limit] (``default`` when absent)."""
    value = params.get(name, default)
    if type(value) not in (int, float) or not 0 < value <= limit:
        raise invalid(name, f"must be a number of seconds in (0, {limit:g}]")
    return float(value)


def flag(params: dict, name: str, default: bool = False) -> bool:
    """``params[name]`` as true or false (``default`` when absent)."""
    value = params.get(name, default)
    if type(value) is not bool:
        raise invalid(name, "must be true or false")
    return value


def choice(params: dict, name: str, choices: tuple[str, ...], default: str) -> str:
    """``params[name]`` as one of ``choices`` (``default`` when absent, null or empty)."""
    value = params.get(name)
    if value is None or value == "":
        value = default
    if value not in choices:
        raise invalid(name, f"must be one of {', '.join(choices)}")
    return value


def str_list(params: dict, name: str, limit: int = 100, *, required: bool = False) -> list[str]:
    """``params[name]`` as a list of at most ``limit`` strings (``[]`` when absent and not ``required``)."""
    value = params.get(name)
    if not value and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > limit:
        raise invalid(name, f"must be a list of at most {limit} strings")
    return value


def obj_list(params: dict, name: str, limit: int) -> list:
    """``params[name]`` as a list of at most ``limit`` items (their shapes are the callee's to check)."""
    value = params.get(name)
    if not isinstance(value, list) or len(value) > limit:
        raise invalid(name, f"must be a list of at most {limit} objects")
    return value


def event_time(params: dict, trust_client_clock: bool) -> float:
    """The event's time (unix s): the client's ``now`` when ``trust_client_clock`` (``[usage]
    trust_client_clock``, for replays and tests) and it is plausible, else the clock."""
    value = params.get("now")
    if trust_client_clock and type(value) in (int, float) and 0 < value < 1e11:
        return float(value)
    return time.time()
