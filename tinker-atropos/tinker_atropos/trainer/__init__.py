"""The trainer process (`launch_training.py`): the run YAML, run-api's client, batches turned into
Datums, the GRPO loop, its metrics and saved states. The inference server runs in it too."""
