"""cogd: a local-first memory and context daemon for AI coding agents.

Kept import-free on purpose: the hook client imports ``cogd.rpc`` (and the
standard-library ``cogd.safepath`` and ``cogd.errors``) on every hook call, and anything imported here would be paid
for on that hot path.
"""

__version__ = "0.1.0"
