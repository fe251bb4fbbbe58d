"""The environment process of a verifiers environment: an Atropos environment in the product's venv
whose rollouts come from the verifiers environment itself, run in its own venv (classic_child.py).

The server runs this file for a verifiers environment, with `verifiers_file` (or
`verifiers_module`) and `verifiers_args` set. Each group is `group_size` rollouts of one dataset row,
run by the environment's own code against the run's inference server; the rubric's reward is the
score, its metrics go to metrics.jsonl (`env_metrics`), and the exact token ids and logprobs the
server returned are what is trained (sequences.py). Held-out evaluation: greedy rollouts of the
environment's eval dataset (its train dataset when it has none).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from atroposlib.envs.base import APIServerConfig, ScoredDataGroup
from pydantic import Field

from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults
from tinker_atropos.models.paths import SMOLLM2
from tinker_atropos.venvs import GENERATIONS, V1
from tinker_atropos.verifiers.child_client import VerifiersChild
from tinker_atropos.verifiers.sequences import Sequence, from_branch, from_text, sequence

# verifiers' per-rollout metrics that the trainer already reports under its own names
AGENT_METRICS = {"num_turns": "turns", "total_tool_calls": "tool_calls"}


class VerifiersHostConfig(ChatTaskConfig):
    verifiers_file: str | None = Field(default=None, description="The verifiers environment's file.")
    verifiers_module: str | None = Field(default=None, description="Or its installed package's module name.")
    verifiers_venv: str | None = Field(
        default=None, description="The venv its child runs in (an environment folder's own); default: its generation's."
    )
    verifiers_args: dict[str, Any] = Field(
        default_factory=dict, description="load_environment's keyword arguments (the ones left out keep its defaults)."
    )
    verifiers_format: Literal["verifiers", "verifiers-v1"] = Field(
        default="verifiers", description="Its API generation: classic (verifiers 0.1.14) or v1 (0.4.0)."
    )
    load_timeout_s: float = Field(default=300.0, gt=0, description="Seconds the environment may take to load.")


@dataclass(frozen=True, eq=False)
class Row(Task):
    """A dataset row of the verifiers environment, by split and index."""

    split: str
    index: int


class VerifiersHostEnv(ChatTaskEnv):
    name = "verifiers"
    env_config_cls = VerifiersHostConfig

    def __init__(self, config: VerifiersHostConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: VerifiersHostConfig = config
        self.child: VerifiersChild | None = None
        self._env_metrics: list[dict[str, float]] = []

    @classmethod
    def config_init(cls) -> tuple[VerifiersHostConfig, list[APIServerConfig]]:
        servers = local_server_defaults(model=SMOLLM2)
        config = VerifiersHostConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=1024,
            max_completion_tokens=128,
            steps_per_eval=10,
            eval_size=16,
            use_wandb=False,
            ensure_scores_are_not_same=False,  # the trainer counts no-signal groups
        )
        return config, servers

    async def setup(self) -> None:
        cfg = self.config
        if not (cfg.verifiers_module or cfg.verifiers_file):
            raise ValueError("a verifiers run needs verifiers_file or verifiers_module in its env config")
        source = {"module": cfg.verifiers_module} if cfg.verifiers_module else {"file": str(cfg.verifiers_file)}
        server = self.server.servers[0].config
        generation = GENERATIONS[cfg.verifiers_format]
        options = ["--tokenizer", str(cfg.tokenizer_name)] if generation is V1 else []  # it renders prompts itself
        self.child = await VerifiersChild.start(
            generation,
            source,
            cfg.verifiers_args,
            server.api_key or "local",
            cfg.load_timeout_s,
            options,
            cfg.verifiers_venv,
        )
        await super().setup()

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        assert self.child is not None
        train = [Row(f"train row {i}", "", "train", i) for i in range(self.child.train_rows)]
        eval_ = [Row(f"eval row {i}", "", "eval", i) for i in range(min(self.config.eval_size, self.child.eval_rows))]
        return train, eval_

    def messages(self, task: Task) -> list[dict[str, str]]:
        raise NotImplementedError("a verifiers environment renders its own prompts")

    def score(self, task: Task, reply: str) -> Score:
        raise NotImplementedError("a verifiers environment is scored by its own rubric")

    async def _group(self, row: Row, n: int, temperature: float) -> list[dict[str, Any]]:
        assert self.child is not None
        server = self.server.servers[0].config
        sampling = {"temperature": temperature, "max_tokens": self.completion_tokens}
        return await self.child.group(row.split, row.index, n, server.model_name, server.base_url, sampling)

    async def collect_trajectories(self, item: Task) -> tuple[ScoredDataGroup | None, list[Any]]:
        assert isinstance(item, Row)
        rollouts = await self._group(item, len(self.group_replies), self.config.temperature)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], overrides=[], inference_logprobs=[], messages=[])
        for rollout in rollouts:
            reward, metrics = rollout["reward"], rollout["metrics"]
            overrides: dict[str, Any] = {"correct": reward >= 1.0, "env_metrics": metrics}
            overrides.update({ours: metrics[theirs] for theirs, ours in AGENT_METRICS.items() if theirs in metrics})
            seq = self._sequence(rollout)
            group["tokens"].append(seq.tokens)
            group["masks"].append(seq.masks)
            group["inference_logprobs"].append(seq.logprobs)
            group["scores"].append(reward)
            group["overrides"].append(overrides)
            group["messages"].append(rollout["prompt"] + rollout["completion"])
            self._rewards.append(reward)
            self._correct.append(reward >= 1.0)
            self._env_metrics.append(metrics)
        return (group if group["tokens"] else None), []

    def _sequence(self, rollout: dict[str, Any]) -> Sequence:
        """The rollout's exact sequence; from its text alone when the server sent no token ids (an
        OpenAI-only endpoint under rl_test_inference), without sampler logprobs."""
        if branch := rollout.get("sequence"):  # verifiers-v1: the trace's own masked sequence
            return from_branch(branch["token_ids"], branch["sampled_mask"], branch["logprobs"])
        turns = rollout.get("turns")
        if turns and all(t is not None and t["completion_logprobs"] is not None for t in turns):
            seq, untrained = sequence(turns)
            if untrained:
                print(
                    f"{self.name}: {untrained} earlier replies of a rollout are not trained: the server "
                    "re-rendered them differently in a later prompt",
                    file=sys.stderr,
                    flush=True,
                )
            return seq
        prompt = self.tokenizer.apply_chat_template(rollout["prompt"], tokenize=False, add_generation_prompt=True)
        reply = "".join(str(m.get("content") or "") for m in rollout["completion"] if m.get("role") == "assistant")
        return from_text(
            self.tokenizer.encode(prompt, add_special_tokens=False),
            self.tokenizer.encode(reply, add_special_tokens=False),
        )

    async def score_greedy(self, task: Task) -> Score:
        """One greedy rollout of an eval row, scored by the environment's rubric."""
        assert isinstance(task, Row)
        reward = float((await self._group(task, 1, 0.0))[0]["reward"])
        return Score(reward, reward >= 1.0)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = dict(wandb_metrics or {})
        names = {name for m in self._env_metrics for name in m}
        for name in sorted(names):
            values = [m[name] for m in self._env_metrics if name in m]
            metrics[f"train/{name}"] = sum(values) / len(values)
        self._env_metrics = []
        await super().wandb_log(metrics)


if __name__ == "__main__":
    VerifiersHostEnv.cli()
