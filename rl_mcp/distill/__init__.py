"""On-policy distillation on the server's side: which teacher a start names, checked before anything
starts (tinker_atropos/distill/ does the scoring in the trainer)."""
