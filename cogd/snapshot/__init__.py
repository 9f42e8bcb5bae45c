"""Commit-addressed snapshots of the index projection on shared storage (docs/architecture.md, "Snapshots").

A snapshot is what a fresh local build of one commit would produce — ``index.db`` and the
entity vectors with the embedding-cache keys they were made from — written once by
``cogd snapshot publish`` and pulled by every daemon that starts without an index, which then
catches up from the snapshot's commit to HEAD through the ordinary incremental refresh and
embedding pass. Memory files and the ledger are never part of it.

Modules, one concept each: :mod:`~cogd.snapshot.gitrepo` (repository id, ancestors, a clean
tree), :mod:`~cogd.snapshot.manifest` (the manifest and its validation),
:mod:`~cogd.snapshot.objects` (the stores: ``file://`` and S3-compatible),
:mod:`~cogd.snapshot.files` (what goes in and how it is checked: the SQLite copies),
:mod:`~cogd.snapshot.publish` and :mod:`~cogd.snapshot.pull`, and :mod:`~cogd.snapshot.state`
(which snapshot the local projection came from; light, for ``cogd status``).
"""
