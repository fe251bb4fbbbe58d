"""Which training item comes next, and what each item's recent groups said of it.

GRPO learns only from a group whose rewards differ; a group whose replies all score the same is
dropped by atroposlib, its rollouts spent for nothing. The environments the product owns draw their
items here (`draw.py`): an item solved by every reply of its last groups is retired, one no reply
solved is drawn less often. For an environment whose `get_next_item` is the user's, the same
ledger (`ledger.py`) only counts, keyed by prompt. Both write `items.json` (docs/run-files.md).
"""
