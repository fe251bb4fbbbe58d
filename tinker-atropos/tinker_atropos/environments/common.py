"""What the bundled chat environments share: one prompt -> a group of sampled replies through
atroposlib's managed server (real tokens + sampler logprobs), a reward per reply, and greedy
evaluations of its validation split (splits.py) and its held-out set (evaluations.py says when).

A subclass supplies its items, the chat messages for an item, and the reward of a reply.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, TypeVar

from atroposlib.envs.base import APIServerConfig, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from pydantic import Field

from tinker_atropos.environments.evaluations import EvalSplit
from tinker_atropos.environments.run_env import RunEnv
from tinker_atropos.environments.splits import ValidationSettings, carve_validation
from tinker_atropos.item_draw.settings import DrawSettings
from tinker_atropos.models.paths import SMOLLM2, TINY_CHAT, model_ref


@dataclass(frozen=True)
class Task:
    """One prompt and what counts as a good answer to it."""

    prompt: str
    answer: str


@dataclass(frozen=True)
class Rollout:
    """One sampled reply: full token ids, training mask (-100 on the prompt), sampler logprobs."""

    tokens: list[int]
    masks: list[int]
    logprobs: list[float] | None
    text: str


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool


class ChatTaskConfig(BaseEnvConfig, DrawSettings, ValidationSettings):
    max_completion_tokens: int = Field(
        default=256,
        ge=1,
        description="Tokens sampled per reply (also capped by max_token_length).",
    )
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature for training rollouts.")
    eval_size: int = Field(
        default=32, ge=0, description="Items of the held-out set, scored (greedy) before the first step and at the end."
    )
    seed: int = Field(default=0, description="Seed for the item order and any generated data.")
    eval_before_training: bool = Field(
        default=True, description="Evaluate the base model (step 0) before the first rollout of a fresh run."
    )
    eval_at_end: bool = Field(
        default=True,
        description="Evaluate the final weights once the trainer has taken its last step (the trainer waits).",
    )


def local_server_defaults(max_requests: int = 16, model: str = TINY_CHAT) -> list[APIServerConfig]:
    """Defaults pointing at a local inference server serving `model` (an offline model name); the
    run config always supplies the URL."""
    return [
        APIServerConfig(
            model_name=model,
            base_url="http://127.0.0.1:8001/v1",
            api_key="local",
            server_type="sglang",
            tokenizer_name=model_ref(model),
            num_max_requests_at_once=max_requests,
            num_requests_for_eval=max_requests,
            timeout=120,
        )
    ]


C = TypeVar("C", bound=BaseEnvConfig)


def served_tools_config(
    config_cls: type[C], name: str, system_prompt: str, **overrides: Any
) -> tuple[C, list[APIServerConfig]]:
    """The defaults of an agent environment whose tools another program serves (an MCP tool server,
    an OpenEnv server): SmolLM2, small groups, short turns, no terminal tools of its own."""
    servers = local_server_defaults(model=SMOLLM2)
    settings: dict[str, Any] = {
        "wandb_name": name,
        "tokenizer_name": servers[0].tokenizer_name,
        "group_size": 4,
        "batch_size": 8,
        "max_token_length": 2048,
        "max_agent_turns": 3,
        "max_turn_tokens": 96,
        "steps_per_eval": 10,
        "use_wandb": False,
        "terminal_backend": "local",  # no terminal tools: the per-rollout directory holds nothing
        "system_prompt": system_prompt,
    }
    return config_cls(**{**settings, **overrides}), servers


class ChatTaskEnv(RunEnv):
    """Base of the bundled environments (abstract: not an environment by itself)."""

    env_config_cls = ChatTaskConfig

    def __init__(self, config: ChatTaskConfig, server_configs: Any, slurm: bool = False, testing: bool = False) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: ChatTaskConfig = config
        self.train_tasks: list[Task] = []
        self.eval_tasks: list[Task] = []
        self.validation_tasks: list[Task] = []
        self._rewards: list[float] = []
        self._correct: list[bool] = []

    # --- what a subclass provides ---

    @abstractmethod
    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        """(train, eval) tasks."""

    @abstractmethod
    def messages(self, task: Task) -> list[dict[str, str]]:
        """The chat messages that pose `task`."""

    @abstractmethod
    def score(self, task: Task, reply: str) -> Score:
        """Reward and correctness of `reply` (plain text, special tokens removed)."""

    def load_validation(self, train: list[Task], held_out: list[Task]) -> tuple[list[Task], list[Task]]:
        """(training, validation): drawn from the training pool unless an environment has its own."""
        cfg = self.config
        size = cfg.validation_items(cfg.eval_size)
        return carve_validation(train, size, cfg.seed, lambda task: task.prompt, held_out)

    # --- BaseEnv ---

    async def setup(self) -> None:
        train, self.eval_tasks = self.load_tasks()
        self.train_tasks, self.validation_tasks = self.load_validation(train, self.eval_tasks)
        if not self.train_tasks:
            raise RuntimeError(f"{self.name}: no training items")

    async def get_next_item(self) -> Task | None:
        return self.draw_from(self.train_tasks)

    @property
    def completion_tokens(self) -> int:
        return min(self.config.max_completion_tokens, self.config.max_token_length)

    async def collect_trajectories(self, item: Task) -> tuple[ScoredDataGroup | None, list[Any]]:
        rollouts = await self._rollouts(self.messages(item))
        # Only the keys with values: atroposlib reads absent keys with .get(key, default).
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], overrides=[])
        if all(r.logprobs is not None for r in rollouts):
            group["inference_logprobs"] = [r.logprobs for r in rollouts]
        for r in rollouts:
            result = self.score(item, r.text)
            group["tokens"].append(r.tokens)
            group["masks"].append(r.masks)
            group["scores"].append(result.reward)
            group["overrides"].append({"correct": result.correct})
            self._rewards.append(result.reward)
            self._correct.append(result.correct)
        return group, []

    async def _rollouts(self, messages: list[dict[str, str]]) -> list[Rollout]:
        """A group of replies: with the sampler's tokens and logprobs (managed server) where
        the server speaks tokens (sglang, vllm); from the reply text alone on an OpenAI-only
        endpoint (e.g. `process` against a hosted model), which is enough to score it."""
        kwargs = dict(n=len(self.group_replies), max_tokens=self.completion_tokens, temperature=self.config.temperature)
        if not isinstance(self.server.servers[0], OpenAIServer):
            async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
                await managed.chat_completion(messages=messages, **kwargs)
                nodes = managed.get_state()["nodes"]
            return [
                Rollout(
                    node.tokens,
                    node.masked_tokens,
                    node.logprobs,
                    self.tokenizer.decode(
                        [t for t, m in zip(node.tokens, node.masked_tokens) if m != -100], skip_special_tokens=True
                    ),
                )
                for node in nodes
            ]
        completion = await self.server.chat_completion(messages=messages, **kwargs)
        prompt_text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = self.tokenizer.encode(prompt_text, add_special_tokens=False)
        out = []
        for choice in completion.choices:
            text = choice.message.content or ""
            reply = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Rollout(prompt + reply, [-100] * len(prompt) + reply, None, text))
        return out

    async def register_env(self) -> None:
        """Registered: on a fresh run, the base model's scores come first (step 0 of both files)."""
        await super().register_env()
        if self.config.eval_before_training and self.curr_step == 0:
            await self.evaluate_both()

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """The periodic evaluation (every steps_per_eval steps): evaluations.RunEvaluations."""
        await self.evaluate_periodic()

    def validation_set(self) -> list[Task]:
        return self.validation_tasks

    def held_out_set(self) -> list[Task]:
        return self.eval_tasks

    async def evaluate_set(
        self, items: list[Task], split: EvalSplit, *, final: bool = False, checkpoint: str | None = None
    ) -> None:
        """Greedy replies to `items`; one line appended to the split's file (docs/run-files.md)."""
        if not items or self.config.data_dir_to_save_evals is None:
            return
        target = await self.evaluation_target(final, checkpoint)
        gate = asyncio.Semaphore(max(1, self.config.max_eval_workers))

        async def one(task: Task) -> Score:
            async with gate:
                return await self.score_greedy(task)

        started = time.monotonic()
        scores = await asyncio.gather(*(one(t) for t in items))
        record = {
            "seconds": round(time.monotonic() - started, 3),
            "eval_accuracy": sum(s.correct for s in scores) / len(scores),
            "eval_reward_mean": sum(s.reward for s in scores) / len(scores),
            "num_items": len(scores),
        }
        self.write_evaluation(split, target, record, final, checkpoint)

    async def score_greedy(self, task: Task) -> Score:
        """One greedy reply to `task`, scored (an evaluation's unit of work)."""
        completion = await self.server.chat_completion(
            messages=self.messages(task), n=1, max_tokens=self.completion_tokens, temperature=0.0, split="eval"
        )
        return self.score(task, completion.choices[0].message.content or "")

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = dict(wandb_metrics or {})
        if self._rewards:
            metrics["train/reward_mean"] = sum(self._rewards) / len(self._rewards)
            metrics["train/percent_correct"] = sum(self._correct) / len(self._correct)
        self._rewards, self._correct = [], []
        await super().wandb_log(metrics)
