"""`python -m tinker_atropos.export`: one export, run by the server in a child process.

    export --base-model NAME (--adapter DIR | --tinker-state tinker://... | --engine-checkpoint tinker://M/C)
           [--tinker-base-url URL] --format adapter|merged|gguf
           [--dtype D] --out DIR --name NAME --prompts FILE --progress FILE --result FILE
    export push --folder DIR --repo OWNER/NAME --result FILE

Progress goes to --progress as JSON lines ({"stage", "fraction"}); the outcome to --result (the
files, the verification, or the error).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tinker_atropos.run_files import atomic_write_text

FORMATS = ("adapter", "merged", "gguf")
DEFAULT_DTYPE = {"adapter": "float32", "merged": "float32", "gguf": "f16"}
# Share of prompts whose greedy reply must equal the trained policy's: exact formats all of them,
# lossy ones (fewer bits than the float32 the policy runs in) at least half.
EXACT = {("adapter", "float32"), ("merged", "float32")}
LOSSY_SHARE = 0.5


class Progress:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, stage: str, fraction: float) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps({"stage": stage, "fraction": round(fraction, 3), "time": time.time()}) + "\n")


def run_export(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    dtype = args.dtype or DEFAULT_DTYPE[args.format]
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="rl-mcp-export-") as tmp:
        adapter = Path(args.adapter) if args.adapter else None
        if args.engine_checkpoint:
            from tinker_atropos.export.engine_weights import download_engine_weights

            progress("downloading from the self-hosted engine", 0.0)
            adapter = download_engine_weights(
                args.engine_checkpoint,
                Path(tmp) / "adapter",
                args.tinker_base_url,
                args.base_model,
                lambda f: progress("downloading", 0.3 * f),
            )
        elif adapter is None:
            from tinker_atropos.export.tinker_weights import download_tinker_weights

            progress("downloading from Tinker", 0.0)
            adapter = download_tinker_weights(
                args.tinker_state,
                Path(tmp) / "adapter",
                args.tinker_base_url,
                lambda f: progress("downloading", 0.3 * f),
            )
        # transformers and peft only now: an export whose weights cannot be had fails without them
        from tinker_atropos.backends.local.engine import load_base_model
        from tinker_atropos.backends.local.training import create_sampler
        from tinker_atropos.export import verify
        from tinker_atropos.export.adapter import write_adapter
        from tinker_atropos.export.model_facts import base_facts

        progress("loading the base model", 0.3)
        base = load_base_model(args.base_model, "cpu")
        if args.engine_checkpoint:
            from tinker_atropos.export.engine_weights import untie_output_head

            untie_output_head(base.model, adapter)  # the engine's embedding LoRA never reaches a tied head
        prompts: list[list[int]] = json.loads(Path(args.prompts).read_text()) or _fallback_prompts(base.tokenizer)
        progress("the trained policy's replies", 0.35)
        source = args.tinker_state or args.engine_checkpoint or _local_identity(Path(args.adapter))
        expected = verify.cached_replies(
            Path(args.replies_cache) if args.replies_cache else None,
            [args.base_model, source, prompts, verify.MAX_NEW_TOKENS],
            lambda: verify.policy_replies(create_sampler(base, str(adapter)), prompts),
        )
        progress(f"writing {args.format}", 0.45)
        if args.format == "adapter":
            files = write_adapter(adapter, out, base_facts(args.base_model).hub_id)
            loaded = _adapter_model(base, out)
        else:
            from tinker_atropos.export.merged import merge, write_merged

            model = merge(base.model, adapter)
            if args.format == "merged":
                files = write_merged(model, base.tokenizer, out, dtype)
                loaded = _transformers_model(out, None)
            else:
                files = _write_gguf(model, base.tokenizer, out, dtype, args.name, progress)
                loaded = _transformers_model(out, files[0].name)
        progress("checking the export against the trained policy", 0.8)
        got = verify.model_replies(loaded, prompts, base.eos_token_ids)
        required = len(prompts) if (args.format, dtype) in EXACT else math.ceil(LOSSY_SHARE * len(prompts))
        check = verify.compare(expected, got, required, base.tokenizer.decode)
        progress("done", 1.0)
    return {
        "format": args.format,
        "dtype": dtype,
        "files": [{"path": str(f), "bytes": f.stat().st_size} for f in files],
        "verification": {
            "prompts": check.prompts,
            "matches": check.matches,
            "required": check.required,
            "ok": check.ok,
            "mismatches": check.mismatches[:3],
        },
    }


def _local_identity(adapter: Path) -> str:
    """A local checkpoint as its folder and its files' sizes and times (a folder saved again differs)."""
    files = sorted(p for p in adapter.iterdir() if p.is_file())
    return f"{adapter.resolve()}:" + ",".join(f"{p.name}={p.stat().st_size}@{p.stat().st_mtime_ns}" for p in files)


def _fallback_prompts(tokenizer: Any) -> list[list[int]]:
    """Chat prompts to check an export on when the run recorded none of its environment's."""
    chats = ["What is 12 + 30?", "Name three colors.", "Write one sentence about rain.", "Say hello."]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False)
        for c in chats
    ]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


def _write_gguf(model: Any, tokenizer: Any, out: Path, dtype: str, name: str, progress: Progress) -> list[Path]:
    from tinker_atropos.export.gguf_file import write_gguf
    from tinker_atropos.export.modelfile import write_modelfile

    out.mkdir(parents=True, exist_ok=True)
    path = write_gguf(
        model,
        tokenizer,
        out / f"{name}-{dtype}.gguf",
        dtype,
        name=name,
        progress=lambda f: progress("writing gguf", 0.45 + 0.3 * f),
    )
    return [path, write_modelfile(path, getattr(tokenizer, "chat_template", None), tokenizer.eos_token)]


def _adapter_model(base: Any, folder: Path) -> Any:
    import copy

    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base.model), str(folder)).eval()


def _transformers_model(folder: Path, gguf_file: str | None) -> Any:
    """Loaded back as a user would, with no PEFT (float32, where the policy's replies were taken); a
    GGUF file by transformers' own loader, quickly (`gguf_loading`)."""
    import torch
    from transformers import AutoModelForCausalLM

    if gguf_file is None:
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    from tinker_atropos.models.gguf_loading import quick_gguf_loading

    with quick_gguf_loading():
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, gguf_file=gguf_file).eval()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["push"]:
        push = argparse.ArgumentParser(prog="python -m tinker_atropos.export push")
        push.add_argument("--folder", required=True)
        push.add_argument("--repo", required=True)
        push.add_argument("--result", required=True)
        args = push.parse_args(argv[1:])
        from tinker_atropos.export.hub import HubError, push_folder

        try:
            outcome: dict[str, Any] = {"url": push_folder(Path(args.folder), args.repo)}
        except HubError as exc:
            outcome = {"error": str(exc)}
        atomic_write_text(Path(args.result), json.dumps(outcome))
        return 0 if "url" in outcome else 1
    parser = argparse.ArgumentParser(prog="python -m tinker_atropos.export")
    parser.add_argument("--base-model", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--adapter")
    source.add_argument("--tinker-state")
    source.add_argument("--engine-checkpoint", help="a self-hosted engine's tinker://M/C, at --tinker-base-url")
    parser.add_argument("--tinker-base-url")
    parser.add_argument("--format", choices=FORMATS, required=True)
    parser.add_argument("--dtype")
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--progress", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--replies-cache", help="a folder keeping the policy's replies by checkpoint and prompts")
    args = parser.parse_args(argv)
    try:
        outcome = run_export(args, Progress(Path(args.progress)))
    except Exception as exc:  # reported to the caller as the export's error, with its type
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    atomic_write_text(Path(args.result), json.dumps(outcome))
    return 0 if "error" not in outcome else 1


if __name__ == "__main__":
    sys.exit(main())
