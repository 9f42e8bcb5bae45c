"""The code index: source listing, tree-sitter extraction, SQLite/FTS5 projection."""
