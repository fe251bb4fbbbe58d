"""What rl_serve_model serves: a run's checkpoint (`best` by validation, `final` or a step, chosen as
rl_export_model chooses), on its base model and where its weights are sampled (this machine, vLLM, or
Tinker), under the name `<run_id>@<checkpoint>`; and the config the standalone inference server reads."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.errors import UserError
from rl_mcp.export.plan import ExportError, choose_checkpoint
from rl_mcp.inference.run_weights import RunCheckpoint, run_target, saved_checkpoints
from rl_mcp.inference.target import LocalWeights, Target, served_trainer
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.store import RunRecord
from tinker_atropos.venvs import nvidia_gpu

SERVER_MODULE = "tinker_atropos.inference_server"


class ServeError(UserError):
    """A model that cannot be served as asked; nothing was started. The message says what to change."""


@dataclass(frozen=True)
class ServePlan:
    run_id: str
    checkpoint: RunCheckpoint
    chosen_because: str  # as asked, final, or best by validation
    model: str  # the served name, `<run_id>@<checkpoint>`: what requests give as `model`
    target: Target  # the run's two models as rl_test_inference serves them: its children's environment
    run_config: dict[str, Any]

    @property
    def weights(self) -> LocalWeights:
        return self.target.local_weights(self.model)

    @property
    def base_model(self) -> str:
        return self.weights.base_model

    @property
    def backend(self) -> str:
        """Where the weights are sampled: local (this machine) or tinker (Tinker's service)."""
        return self.weights.backend

    @property
    def sampler(self) -> str:
        """On this machine: vllm where the run sampled with it (trainer.sampler) or where an NVIDIA GPU is
        (vLLM's CUDA build serves a LoRA far faster than the product's engine), else engine (the product's
        own); tinker on Tinker's."""
        if self.backend == "tinker":
            return "tinker"
        asked = str((self.run_config.get("trainer") or {}).get("sampler") or "engine")
        return "vllm" if asked == "engine" and nvidia_gpu() else asked

    @property
    def vllm_url(self) -> str | None:
        """The vLLM server of the user's that the run sampled on (trainer.vllm_url): the adapter is loaded
        there and none is started; None where the served server starts vLLM of its own (or uses none)."""
        if self.sampler != "vllm":
            return None
        return str((self.run_config.get("trainer") or {}).get("vllm_url") or "") or None


def plan_serve(rec: RunRecord, wanted: str | int | None) -> ServePlan:
    """The checkpoint `wanted` ('best', 'final', a step; None: best where the run keeps it, else final)."""
    saved = saved_checkpoints(rec)
    if not saved:
        raise ServeError(
            f"run {rec.run_id} has no saved weights yet (no sampler checkpoint in its folder): wait for its first "
            "step (rl_check_status), or serve another run (rl_list_runs)"
        )
    try:
        config = read_run_config(rec.config_path)
    except RUN_CONFIG_ERRORS as exc:
        raise ServeError(f"the config of run {rec.run_id} is unreadable ({exc}): its weights cannot be served") from exc
    keep_best = bool((config.get("trainer") or {}).get("keep_best", True))
    try:
        chosen, why = choose_checkpoint(rec, saved, wanted, keep_best=keep_best)
    except ExportError as exc:
        raise ServeError(str(exc)) from exc
    target = run_target(rec, chosen)
    return ServePlan(rec.run_id, chosen, why, target.models[1], target, config)


def server_config(plan: ServePlan, port: int, folder: Path) -> dict[str, Any]:
    """The run's config as the standalone inference server reads it: the plan's weights on
    127.0.0.1:`port`, named `plan.model`."""
    cfg = copy.deepcopy(plan.run_config)
    cfg["trainer"] = served_trainer(cfg.get("trainer") or {}, plan.weights, port, folder)
    if plan.sampler != "tinker":
        cfg["trainer"]["sampler"] = plan.sampler
    cfg["openai"] = [{"model_name": plan.model, "base_url": f"http://127.0.0.1:{port}/v1", "api_key": None}]
    return cfg


def server_argv(python: str, config: Path, plan: ServePlan) -> list[str]:
    """The standalone inference server on `config` with the checkpoint as its adapter, each request
    logged with the weights that served it."""
    return [python, "-m", SERVER_MODULE, "--config", str(config), "--adapter", plan.checkpoint.path, "--log-requests"]
