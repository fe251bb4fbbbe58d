"""A step's sampler set up with its adapter merged directly (`backends/local/lora_merge.py`) against
PEFT's route (wrap every layer, merge, unwrap), side by side in one process, on the same adapter.

For each model: an adapter as the trainer saves one (rank 16, every linear layer, B not zero), then
`--runs` rounds of both ways in turn, each a fresh copy of the base (as `create_sampler` makes).
Printed: the median CPU seconds each way, their ratio, and whether the weights are the same bit for bit.

    .venv/bin/python bench/sampler_merge.py [--models tiny-chat smollm2-135m] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model

from tinker_atropos.backends.local import load_base_model
from tinker_atropos.backends.local.lora_merge import merge_plain_lora
from tinker_atropos.backends.local.training import lora_config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny-chat", "smollm2-135m"])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':14} {'PEFT s':>8} {'direct s':>9} {'direct/PEFT':>12}  same weights")
    for name in a.models:
        base = load_base_model(name, "cpu")
        trained = get_peft_model(base.copy_model(), lora_config(16))
        with torch.no_grad():
            for p in trained.parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 0.01)
        adapter = Path(tempfile.mkdtemp(prefix="bench-adapter-"))
        trained.save_pretrained(adapter)
        peft_s, direct_s, same = [], [], True
        for _ in range(a.runs):
            started = time.process_time()
            expected = PeftModel.from_pretrained(base.copy_model(), str(adapter)).merge_and_unload()
            peft_s.append(time.process_time() - started)
            started = time.process_time()
            model = base.copy_model()
            assert merge_plain_lora(model, adapter)
            direct_s.append(time.process_time() - started)
            pairs = zip(expected.state_dict().values(), model.state_dict().values(), strict=True)
            same = same and all(torch.equal(x, y) for x, y in pairs)
        p, d = statistics.median(peft_s), statistics.median(direct_s)
        print(f"{name:14} {p:8.3f} {d:9.3f} {d / p:12.2f}  {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
