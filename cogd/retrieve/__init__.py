"""Retrieval and context packs: BM25 candidates, selection, budgeted rendering."""
