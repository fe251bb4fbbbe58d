"""Bundled Atropos environments: `letter_repeat` (offline, learnable by tiny-chat) and
`gsm8k_tinker` (HF gsm8k, or generated grade-school problems offline)."""
