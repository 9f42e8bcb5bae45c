"""The memory side's name for the scanner: everything lives in :mod:`cogd.secrets` (one module owns
the secret scan for memory, the ledger and the logs); this keeps ``cogd.memory.secrets`` imports working."""

from __future__ import annotations

from cogd.secrets import PREVIEW_CHARS, Finding, mask, mask_data, redact, scan, shannon_entropy, strip_private

__all__ = ["PREVIEW_CHARS", "Finding", "mask", "mask_data", "redact", "scan", "shannon_entropy", "strip_private"]
