"""The memory layer's refusals: :class:`cogd.errors.CogdError` with the memory kinds.

The daemon maps a :class:`MemoryRefused` like any other :class:`~cogd.errors.CogdError`
(same ``kind`` and ``data``); this module knows nothing of the protocol.
"""

from __future__ import annotations

from cogd.errors import CogdError

#: The kinds a memory operation may be refused with (a subset of :data:`cogd.errors.CODES`).
KINDS = ("illegal_transition", "tombstoned", "secret_detected", "duplicate", "not_found", "bad_request")


class MemoryRefused(CogdError):
    """A refused memory operation.

    ``kind``: one of :data:`KINDS`; ``data``: JSON-safe details (ids, dates,
    reasons, a preview of at most 4 characters for a secret).
    """

    def __init__(self, kind: str, message: str, fix: str | None = None, **data: object):
        if kind not in KINDS:
            raise ValueError(f"not a memory error kind: {kind!r}")
        super().__init__(kind, message, fix, **data)


def bad_request(message: str, fix: str | None = None, **data: object) -> MemoryRefused:
    """A ``bad_request`` refusal (a malformed argument); ``fix`` as in :func:`cogd.errors.bad_request`."""
    return MemoryRefused("bad_request", message, fix, **data)


def not_found(entity_id: str) -> MemoryRefused:
    """A ``not_found`` refusal for the memory ``entity_id``."""
    return MemoryRefused("not_found", f"no memory {entity_id!r}", id=entity_id)
