"""The agent's session: state (selection + edits), field validation, and the run config built from them."""
