"""The supervised stage as a run runs it: a child process builds the set from the environment's
demonstrations, evaluates the held-out items, trains cross_entropy steps on the run's adapter,
evaluates again and leaves the state the RL stage starts from. Its evaluations' requests get the
timeouts a run fits from the measured decode speed (env_health.json), as RL's do."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import warm_children
import yaml

from tinker_atropos.request_timeouts import Policy
from tinker_atropos.run_files import RunFiles, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = ROOT / "tinker-atropos" / "tinker_atropos" / "environments" / "tool_calculator.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_config(run_dir: Path, tiny_path: Path, sft: dict, *, timeout_s: int = 120, **env: object) -> Path:
    """A run's config as the server writes it; `timeout_s`: the environment's own request timeout."""
    port = free_port()
    config = {
        "env": {
            "tokenizer_name": str(tiny_path),
            "group_size": 2,
            "batch_size": 4,
            "eval_size": 2,
            "max_token_length": 4096,  # tiny-chat: a token a character
            "max_turn_tokens": 48,
            "wandb_name": "calc-sft",
            "use_wandb": False,
            "data_dir_to_save_evals": str(run_dir),
            "sft": sft,
            **env,
        },
        "openai": [
            {
                "model_name": "tiny-chat",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "api_key": "local",
                "server_type": "sglang",
                "tokenizer_name": str(tiny_path),
                "timeout": timeout_s,
            }
        ],
        "request_timeouts": asdict(Policy()),
        "trainer": {
            "backend": "local",
            "base_model": "tiny-chat",
            "lora_rank": 4,
            "total_steps": 2,
            "api_url": "http://127.0.0.1:1",
            "inference_port": port,
            "run_dir": str(run_dir),
            "device": "cpu",
        },
    }
    path = run_dir / "config.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def stage(
    config: Path, *flags: str, env: dict[str, str] | None = None, env_file: Path = CALCULATOR
) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tinker_atropos.sft.stage", "--config", str(config), "--env-file", str(env_file)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return warm_children.run([*argv, *flags], env=env, timeout=600)  # forked warm, as the server runs it


def test_the_stage_trains_between_two_evaluations_and_leaves_its_state(tiny_path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    sft = {"sources": ["demonstrations"], "items": 4, "batch_size": 2, "max_steps": 3, "learning_rate": 1e-3}
    done = stage(run_config(run_dir, tiny_path, sft))
    assert done.returncode == 0, done.stderr[-3000:]
    files = RunFiles(run_dir)
    steps = read_jsonl(files.sft_steps)
    assert [s["step"] for s in steps] == [1, 2, 3] and all(s["total_steps"] == 3 and s["loss"] > 0 for s in steps)
    evals = [e for e in read_jsonl(files.evals) if e.get("stage") == "sft"]
    assert [e["sft_step"] for e in evals] == [0, 3] and all(e["num_items"] == 2 for e in evals)
    result = json.loads(files.sft_result.read_text())
    assert result["steps"] == 3 and result["ended"] == "budget" and Path(result["state"]).is_dir()
    summary = json.loads(files.sft_summary.read_text())
    assert summary["counts"] == {"demonstrations": {"kept": 4, "refused": 0}}
    spans = summary["example"]["spans"]
    assert [s["trained"] for s in spans][:2] == [False, True] and "<tool_call>" in spans[1]["text"]


def test_an_evaluation_whose_replies_outlive_the_environments_timeout_asks_nothing_twice(tiny_path, tmp_path) -> None:
    """The environment's own timeout is 1 s (atroposlib's least: an int) and each greedy reply of 1000
    tokens takes longer, about 2.3 s on an idle AVX-512 EPYC (the tiny model's never stop). Held to it,
    every try was thrown away and asked again; fitted from the decode step the stage times before its
    first evaluation, each request's timeout holds its reply."""
    run_dir = tmp_path / "run"
    sft = {"sources": ["demonstrations"], "items": 2, "batch_size": 2, "max_steps": 1, "learning_rate": 1e-3}
    done = stage(run_config(run_dir, tiny_path, sft, timeout_s=1, max_turn_tokens=1000))
    assert done.returncode == 0, done.stderr[-3000:]
    files = RunFiles(run_dir)
    evals = [e for e in read_jsonl(files.evals) if e.get("stage") == "sft"]
    assert [e["sft_step"] for e in evals] == [0, 1] and all(e["seconds"] > 1 for e in evals), evals  # outlived it
    requests = json.loads(files.env_health.read_text())["requests"]
    assert requests["sent"] == requests["answered"] == 4, requests  # 2 items twice, each asked once
    assert requests["timeouts"] == requests["client_retries"] == requests["failed"] == 0, json.dumps(requests)
    assert requests["reply_tokens"] == 4 * 1000 and requests["client_timeout_s"] > 10, requests
    assert "ms a decode step at the" in requests["client_timeout_basis"], requests  # measured, not the 1 s


def test_a_preview_builds_the_set_and_trains_nothing(tiny_path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    sft = {"sources": ["demonstrations"], "items": 3, "min_score": 2.0}  # the reward tops out at 1: all refused
    done = stage(run_config(run_dir, tiny_path, sft), "--preview")
    assert done.returncode == 2 and "no supervised example is left (3 refused" in done.stderr
    summary = json.loads(RunFiles(run_dir).sft_summary.read_text())
    assert summary["counts"] == {"demonstrations": {"kept": 0, "refused": 3}}
    assert "under min_score 2" in summary["refused"][0]["reason"]
    assert not RunFiles(run_dir).sft_steps.exists()


def test_hermes_trajectories_teach_the_ported_terminal_environment(tiny_path, tmp_path) -> None:
    """The user's own ShareGPT trajectory file (examples/hermes_port/trajectories.jsonl) for the ported
    Hermes environment: every line kept, rendered with the environment's system prompt and tools."""
    port = ROOT / "examples" / "hermes_port"
    sft = {"sources": ["file"], "file": str(port / "trajectories.jsonl"), "batch_size": 1}
    # tiny-chat spends a token per character: the terminal tool's schema alone is ~6k
    config = run_config(tmp_path / "run", tiny_path, sft, enabled_toolsets=["terminal"], max_token_length=9000)
    done = stage(config, "--preview", env_file=port / "terminal_hello_env.py")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(RunFiles(tmp_path / "run").sft_summary.read_text())
    assert summary["counts"] == {"file": {"kept": 5, "refused": 0}}
    spans = summary["example"]["spans"]
    assert not spans[0]["trained"] and "You are a helpful agent with shell access" in spans[0]["text"]
    assert spans[1]["trained"] and '"name": "terminal"' in spans[1]["text"]
    assert "<tool_response>" in spans[2]["text"] and not spans[2]["trained"]  # the recorded result weighs nothing
