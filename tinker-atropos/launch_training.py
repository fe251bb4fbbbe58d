"""Thin shim: `python launch_training.py --config X.yaml` (see tinker_atropos/trainer/launch.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tinker_atropos.trainer.launch import main

if __name__ == "__main__":
    sys.exit(main())
