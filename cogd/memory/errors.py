"""The one exception type of the memory layer, with the protocol's stable kinds.

The daemon maps :class:`MemoryError_` to a JSON-RPC error with the same
``kind`` and ``data``; this module knows nothing of the protocol.
"""

from __future__ import annotations

KINDS = ("illegal_transition", "tombstoned", "secret_detected", "duplicate", "not_found", "bad_request")


class MemoryError_(Exception):  # noqa: N801 (trailing underscore: not the builtin MemoryError)
    """A refused memory operation.

    ``kind``: one of :data:`KINDS`; ``data``: JSON-safe details (ids, dates,
    reasons, a preview of at most 4 characters for a secret).
    """

    def __init__(self, kind: str, message: str, **data: object):
        super().__init__(message)
        assert kind in KINDS, kind
        self.kind = kind
        self.data = data


def bad_request(message: str, **data: object) -> MemoryError_:
    return MemoryError_("bad_request", message, **data)


def not_found(entity_id: str) -> MemoryError_:
    return MemoryError_("not_found", f"no memory {entity_id!r}", id=entity_id)
