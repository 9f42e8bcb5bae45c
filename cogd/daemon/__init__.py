"""The per-repository daemon: socket server, service, index worker, lifecycle.

Empty on purpose: the hook client imports ``cogd.daemon.client`` and
``cogd.daemon.control`` and must not pay for the server's imports.
"""
