"""The memory types and the folder each lives in: their one home.

Light on purpose (no imports), so the command line can offer the types as choices without
loading the record parser (YAML, ULIDs). Statuses live with the lattice that moves between
them (:data:`cogd.memory.lattice.STATUSES`).
"""

TYPES = ("observation", "rule", "knowledge")
FOLDERS = {"observation": "observations", "rule": "rules", "knowledge": "knowledge"}  # .cogd/memory/<folder>/
