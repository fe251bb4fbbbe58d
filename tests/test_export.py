"""rl_export_model on a real short SmolLM2 run: an adapter, a merged model and a GGUF file, each
loaded back and checked against the trained policy by the export itself; the model card; the
CLI; and the two network boundaries (Tinker's download, the Hub's push) failing fast and clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from test_progress import call_with_progress
from test_runs_mcp import call, environ, serving, wait_status

from tinker_atropos.models.gguf_loading import QuickGGUFReader

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
RUN_EDITS = {"total_steps": 2, "group_size": 4, "batch_size": 8, "eval_size": 4, "steps_per_eval": 1000}
NO_PEFT = """
import sys
sys.modules["peft"] = None  # "no PEFT installed": any import of it fails
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = sys.argv[1]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
chat = [{"role": "user", "content": "What is 2 + 3?"}]
text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
out = model.generate(**tok(text, return_tensors="pt"), max_new_tokens=8, do_sample=False)
print("REPLY", repr(tok.decode(out[0], skip_special_tokens=True)[-40:]))
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


async def test_a_smollm2_run_exports_as_adapter_merged_and_gguf(rl_home: Path) -> None:
    env = environ(rl_home, RL_MCP_PROFILE="smollm2")
    async with serving(env) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="arithmetic")
        for field, value in RUN_EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        status = await wait_status(client, run_id, {"completed", "failed", "stopped", "lost"}, timeout=900)
        assert status["status"] == "completed", status
        results = await call(client, "rl_get_results", run_id=run_id)
        assert "rl_export_model" in results["next_step"]

        exports: dict[str, dict[str, Any]] = {}
        for fmt, dtype in (("adapter", None), ("merged", None), ("gguf", "q8_0")):
            args = {"run_id": run_id, "format": fmt, **({"dtype": dtype} if dtype else {})}
            answer, progress = await call_with_progress(client, "rl_export_model", **args)
            exports[fmt] = answer
            assert progress.seen[-1] == (1.0, 1.0, "done"), progress.seen  # its fractions, rising to the end
            check = answer["check"]
            assert check["prompts"] >= 1 and check["matches"] >= check["required"], answer
            assert answer["checkpoint_step"] == 2 and "best validation accuracy" in answer["chosen_because"]
            for f in answer["files"]:
                assert Path(f["path"]).stat().st_size == f["bytes"] > 0
            card = Path(answer["model_card"]).read_text()
            for needed in ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0", "`arithmetic`", "held-out items"):
                assert needed in card, needed
            assert "reward_curve.png" in card and (Path(answer["folder"]) / "reward_curve.png").stat().st_size > 0
            assert "`eval_size`: `4`" in card  # the run's edits: what differs from the profile

        # the trained policy was sampled once for the three: its replies kept by checkpoint and prompts
        assert len(list((Path(exports["adapter"]["folder"]).parent / ".policy-replies").glob("*.json"))) == 1
        adapter = Path(exports["adapter"]["folder"])
        assert {p.name for p in adapter.iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
        assert exports["adapter"]["check"]["matches"] == exports["adapter"]["check"]["prompts"]
        assert "PeftModel.from_pretrained" in exports["adapter"]["load_command"]
        merged = Path(exports["merged"]["folder"])
        assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
            p.name for p in merged.iterdir()
        }
        assert exports["merged"]["check"]["matches"] == exports["merged"]["check"]["prompts"]
        gguf = [Path(f["path"]) for f in exports["gguf"]["files"] if f["path"].endswith(".gguf")]
        assert len(gguf) == 1 and gguf[0].name.endswith("-q8_0.gguf")
        types = {t.name: t.tensor_type.name for t in QuickGGUFReader(gguf[0]).tensors}  # the file the export wrote
        assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == "Q8_0"
        assert types["output_norm.weight"] == "F32"
        modelfile = (gguf[0].parent / "Modelfile").read_text()
        assert f"FROM ./{gguf[0].name}" in modelfile and "<|im_end|>" in modelfile
        assert "ollama create" in exports["gguf"]["load_command"]

        # the merged folder loads in a process where PEFT cannot be imported
        loaded = subprocess.run(
            [sys.executable, "-c", NO_PEFT, str(merged)], capture_output=True, text=True, timeout=300
        )
        assert loaded.returncode == 0 and "REPLY" in loaded.stdout, loaded.stderr[-2000:]

        # wrong asks are refused with what to change
        assert "allowed: f16, q8_0" in await _error(
            client, "rl_export_model", run_id=run_id, format="gguf", dtype="float16"
        )
        missing = await _error(client, "rl_export_model", run_id=run_id, format="adapter", checkpoint=7)
        assert "no checkpoint at step 7" in missing and "1, 2" in missing

        # the Hub: no token -> says which variable, before any conversion (the adapter folder is untouched)
        adapter_files = {p.name: p.stat().st_mtime_ns for p in adapter.iterdir()}
        no_token = await _error(client, "rl_export_model", run_id=run_id, format="adapter", hub_repo="me/model")
        assert "HF_TOKEN" in no_token and "Nothing was exported" in no_token, no_token
        assert {p.name: p.stat().st_mtime_ns for p in adapter.iterdir()} == adapter_files
    # a token but no Hub -> within seconds, and the token never shown
    secret = "hf_rlmcpsecret0000000000000000"
    hub_env = {**env, "HF_TOKEN": secret, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HUB_OFFLINE": "0"}
    async with serving(hub_env) as (_, server), Client(server) as client:
        started = time.monotonic()
        error = await _error(client, "rl_export_model", run_id=run_id, format="adapter", hub_repo="me/model")
        assert "could not be reached" in error and "me/model" in error and secret not in error
        assert "nothing was exported" in error and time.monotonic() - started < 30

    # the command line: the same export beside the registry, the answer as JSON on stdout
    out = rl_home / "cli-export"
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_mcp",
            "export",
            run_id,
            "--format",
            "adapter",
            "--checkpoint",
            "final",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'tinker-atropos'}"},
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    answer = json.loads(cli.stdout)
    assert answer["folder"] == str(out) and answer["chosen_because"] == "the final weights"
    assert "%]" in cli.stderr  # progress lines


def test_a_tinker_export_fails_fast_and_clearly_without_key_or_service(tmp_path: Path) -> None:
    """Up to the network boundary: no key -> which variable; a key but no service -> within the
    connect timeout, naming the address; the key never appears."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[]")

    def export(extra: dict[str, str]) -> tuple[dict[str, Any], float]:
        result = tmp_path / f"result-{len(extra)}.json"
        argv = [sys.executable, "-m", "tinker_atropos.export", "--base-model", "smollm2-135m", "--format", "adapter"]
        argv += ["--tinker-state", "tinker://run-1/weights/step-000002", "--out", str(tmp_path / "out")]
        argv += [
            "--name",
            "t",
            "--prompts",
            str(prompts),
            "--progress",
            str(tmp_path / "p.jsonl"),
            "--result",
            str(result),
        ]
        env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"} | extra
        started = time.monotonic()
        subprocess.run(argv, env=env, timeout=120, check=False, capture_output=True)
        return json.loads(result.read_text()), time.monotonic() - started

    outcome, _ = export({})
    assert "TINKER_API_KEY is not set" in outcome["error"]
    key = "tml-rlmcpsecretkey000000"
    url = f"http://127.0.0.1:{_closed_port()}"
    outcome, seconds = export({"TINKER_API_KEY": key, "TINKER_BASE_URL": url, "TINKER_CONNECT_TIMEOUT": "1"})
    assert "Tinker" in outcome["error"] and key not in outcome["error"] and seconds < 60, outcome
