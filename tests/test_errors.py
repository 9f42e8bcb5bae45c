"""cogd's one error type: the kinds' table, the documented table, and each error type's kind and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cogd.errors import CODES, CogdError

PROJECT = Path(__file__).resolve().parent.parent


def documented_kinds() -> dict[str, int]:
    """The kind -> code table of docs/protocol.md's "Errors" section."""
    text = (PROJECT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    return {kind: int(code) for kind, code in re.findall(r"^\| `([a-z_]+)` \| (-\d+) \|", section, re.M)}


def test_the_protocol_documents_every_kind_with_its_code():
    assert documented_kinds() == CODES
    assert len(set(CODES.values())) == len(CODES)  # one code per kind


def test_every_kind_is_raised_somewhere_in_cogd():
    """A kind nothing raises is a promise to clients that nothing keeps."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (PROJECT / "cogd").rglob("*.py")
                       if p.name != "errors.py")
    quoted = set(re.findall(r"\"([a-z_]+)\"", source))
    helpers = {"bad_request", "not_found"}  # also raised through cogd.errors' helpers of that name
    assert set(CODES) - quoted - helpers == set()


def test_a_remote_error_is_a_cogd_error_with_the_remote_kind_fix_and_data():
    from cogd.rpc.client import RemoteError

    sent = {"code": -32003, "message": "stale cannot become candidate",
            "data": {"kind": "illegal_transition", "fix": "set `status:` back", "id": "01J"}}
    exc = RemoteError(sent)
    assert isinstance(exc, CogdError) and isinstance(exc, RuntimeError)
    assert (exc.kind, exc.code, exc.fix, exc.message, str(exc)) == (
        "illegal_transition", -32003, "set `status:` back", "stale cannot become candidate",
        "stale cannot become candidate")
    assert exc.data == sent["data"] and exc.to_json() == sent
    assert exc.line() == "stale cannot become candidate (illegal_transition)\n  fix: set `status:` back"
    # A kind of another daemon version is kept as sent; a malformed error object is survived.
    assert RemoteError({"code": -32050, "message": "later", "data": {"kind": "from_the_future"}}).kind == "from_the_future"
    odd = RemoteError({"message": 7, "data": [1]})
    assert (odd.kind, odd.code, odd.fix, odd.data, odd.line()) == ("", None, None, {}, "7")


def test_daemon_unavailable_is_a_cogd_error_and_still_a_connection_error():
    from cogd.rpc.client import DaemonUnavailable, UntrustedListener

    exc = UntrustedListener("/run/x.sock: not a socket (a link or a file): refused")
    assert isinstance(exc, DaemonUnavailable) and isinstance(exc, ConnectionError) and isinstance(exc, CogdError)
    assert (exc.kind, exc.code, str(exc), exc.fix) == (
        "unavailable", CODES["unavailable"], "/run/x.sock: not a socket (a link or a file): refused", None)
    with pytest.raises(OSError):
        raise DaemonUnavailable("timed out", "run `cogd start`")


def test_model_error_is_a_cogd_error_and_still_a_runtime_error():
    from cogd.embed.model import ModelError

    exc = ModelError("embed.model_dir is not a directory: /x", "set embed.model_dir to a folder")
    assert isinstance(exc, RuntimeError) and isinstance(exc, CogdError)
    assert exc.to_json() == {"code": CODES["model"], "message": "embed.model_dir is not a directory: /x",
                             "data": {"kind": "model", "fix": "set embed.model_dir to a folder"}}


def test_the_memory_bad_request_takes_its_fix_like_the_general_one():
    from cogd import errors
    from cogd.memory import errors as memory_errors

    for helper in (errors.bad_request, memory_errors.bad_request):
        exc = helper("superseded_by names nothing", "set `superseded_by:`", id="01J")
        assert (exc.kind, exc.fix, exc.data) == ("bad_request", "set `superseded_by:`", {"id": "01J"})
        assert exc.line() == "superseded_by names nothing. Fix: set `superseded_by:`"
    assert isinstance(memory_errors.bad_request("x"), memory_errors.MemoryRefused)
