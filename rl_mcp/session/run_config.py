"""The run config (docs/run-files.md) built from the profile, the schema and the session.

rl_start_training and rl_test_inference both write it; it never holds a secret.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from rl_mcp.environments.records import ConfigSchema
from rl_mcp.session.fields import resolve_field
from rl_mcp.session.state import SessionState, wandb_name_for
from rl_mcp.settings import Profile
from tinker_atropos.request_timeouts import Policy
from tinker_atropos.run_files import atomic_write_text

LOCAL_API_KEY = "local"  # our own inference server: never a real secret


def render_run_config(
    *,
    profile: Profile,
    schema: ConfigSchema,
    state: SessionState,
    api_port: int,
    inference_port: int,
    run_dir: Path,
    run_name: str | None = None,
    engine_url: str | None = None,
) -> dict[str, Any]:
    """The run YAML of docs/run-files.md as a dict: never holds a secret. `engine_url`: the self-hosted
    Tinker engine the profile trains on (the trainer then sends it no Tinker key)."""
    run_dir = Path(run_dir).resolve()
    name = run_name or state.wandb_name or wandb_name_for(schema.environment)
    values = {n: resolve_field(schema, profile, state, n) for n in schema.fields}
    env = {n: v for n, (v, status) in values.items() if schema.fields[n].section == "env" and status != "managed"}

    def edited(section: str) -> dict[str, Any]:  # the rest keep the environment's own defaults
        return {n: v for n, (v, status) in values.items() if schema.fields[n].section == section and status == "edited"}

    # what its format runs (a task, a tool server, a verifiers file or folder, an OpenEnv source), then
    # its own sections' edits (a task's generator settings, load_environment's arguments)
    env.update(schema.run_source)
    env.update({key: edited(section) for section, key in schema.section_keys.items()})
    env.update(
        tokenizer_name=profile.tokenizer_name,
        rollout_server_url=f"http://127.0.0.1:{api_port}",
        data_dir_to_save_evals=str(run_dir),
        wandb_name=name,
    )
    trainer: dict[str, Any] = {**profile.defaults["trainer"], **profile.locked["trainer"]}
    trainer.update({n: v for n, (v, _) in values.items() if schema.fields[n].section == "trainer"})
    trainer.update(
        backend=profile.backend,
        base_model=profile.model,
        total_steps=env["total_steps"],
        api_url=env["rollout_server_url"],
        inference_host="127.0.0.1",
        inference_port=inference_port,
        run_dir=str(run_dir),
        run_name=name,
        use_wandb=bool(env.get("use_wandb", False)),
    )
    if engine_url is not None:
        trainer.update(tinker_base_url=engine_url, self_hosted=True)
    server = {k: v for k, v in profile.inference.items() if k != "api_key"}
    server.update(
        model_name=profile.model,
        base_url=f"http://127.0.0.1:{inference_port}/v1",
        api_key=LOCAL_API_KEY,
        tokenizer_name=profile.tokenizer_name,
    )
    server.setdefault("server_type", "sglang")
    # each request's timeout follows the work on this server (tinker_atropos/request_timeouts.py)
    timeouts = asdict(Policy())
    return {
        "env": env,
        "openai": [server],
        "trainer": trainer,
        "request_timeouts": timeouts,
        "slurm": False,
        "testing": False,
    }


def write_run_config(path: Path, config: dict[str, Any]) -> Path:
    """Write the run YAML atomically (readers never see half a file)."""
    atomic_write_text(Path(path), yaml.safe_dump(config, sort_keys=False))
    return Path(path)
