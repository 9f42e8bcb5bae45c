"""The daemon process: socket server, service and its method modules, index worker, watcher.

Nothing light lives here: the wire that clients share with the daemon is
:mod:`cogd.rpc`. Empty on purpose, so importing one module of the process
does not import the rest.
"""
