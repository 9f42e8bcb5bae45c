"""Ages in the words every cogd surface uses: ``42s``, ``5m 03s``, ``2h 07m``, ``3d 04h``.

One spelling for ``cogd status``, the other CLI commands and the viewer (standard library only).
"""

from __future__ import annotations


def format_age(seconds: float) -> str:
    """``seconds`` (a duration, negative read as 0) as ``42s``, ``5m 03s``, ``2h 07m`` or ``3d 04h``."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"
