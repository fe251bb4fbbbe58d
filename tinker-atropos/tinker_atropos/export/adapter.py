"""`adapter`: the run's LoRA as a PEFT folder that `PeftModel.from_pretrained(base, folder)` loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def write_adapter(adapter_dir: Path, out: Path, base_name: str) -> list[Path]:
    """Copy the adapter's two files; its config names the base model as users know it."""
    out.mkdir(parents=True, exist_ok=True)
    missing = [f for f in ADAPTER_FILES if not (adapter_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{adapter_dir} is not a PEFT adapter folder: {', '.join(missing)} missing")
    shutil.copyfile(adapter_dir / "adapter_model.safetensors", out / "adapter_model.safetensors")
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base_name
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return [out / f for f in ADAPTER_FILES]
