"""Shared by the run and inference families: what an environment process reports, as answers and
their views. No tools of its own."""
