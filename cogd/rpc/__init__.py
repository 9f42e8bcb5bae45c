"""The wire: what the hook, the CLI and the MCP server share with the daemon.

The standard library plus cogd's own foundation modules (``cogd.errors``,
``cogd.safepath``, ``cogd.paths``), no third-party package, and kept light on
purpose: the hook process imports
``cogd.rpc.client``, ``cogd.rpc.fastjson`` and ``cogd.rpc.locate`` on every
hook call, and every millisecond spent importing is paid on the agent's
critical path (``tests/test_wiring.py`` lists what the hook may load).

- ``protocol`` — JSON-RPC 2.0 framing and error codes (the daemon's side).
- ``client`` — one request over the Unix socket, without ``socket`` or ``json``; the hook
  deadline's one parser (``parse_deadline_ms``), shared with ``cogd.config``.
- ``fastjson`` — JSON through the C accelerator, without importing ``json``.
- ``locate`` — repository root, socket path and runtime directory as strings.
- ``control`` — lifecycle: the lock, spawning, readiness, stopping.

Nothing here imports the daemon, the index or any third-party package. Inside
the foundation layer, ``locate`` sits below ``cogd.paths`` (which builds on it)
and ``control`` above it (it uses ``Layout`` for the lock and pid files).
"""
