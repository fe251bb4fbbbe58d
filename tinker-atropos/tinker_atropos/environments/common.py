"""What the bundled chat environments share: one prompt -> a group of sampled replies through
atroposlib's managed server (real tokens + sampler logprobs), a reward per reply, and greedy
evaluations (docs/run-files.md): the validation split (splits.py) before the first step, every
steps_per_eval steps and at the end, in validation.jsonl; the held-out set before the first step
and at the end only, and once more on the run's best checkpoint, in eval.jsonl.

A subclass supplies its items, the chat messages for an item, and the reward of a reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from atroposlib.envs.base import APIServerConfig, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from pydantic import Field

from tinker_atropos.best_checkpoint import BEST, best_of
from tinker_atropos.environments.run_env import RunEnv
from tinker_atropos.environments.splits import carve_validation
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.inference_server.holder import BEST_LABEL, DONE_LABEL, FINAL_LABEL
from tinker_atropos.item_draw.settings import DrawSettings
from tinker_atropos.models.paths import SMOLLM2, TINY_CHAT, model_ref
from tinker_atropos.run_files import RunFiles, append_jsonl, read_jsonl

logger = logging.getLogger(__name__)

# the final eval: how often the trainer is asked whether it serves its last weights, and how long it
# may stay unreachable before it is taken for gone
FINAL_POLL_S, FINAL_UNREACHABLE_S = 0.2, 10.0
EvalSplit = Literal["validation", "held_out"]  # validation.jsonl, eval.jsonl
FINAL_WATCH_S = 1.0  # how often a running environment asks whether the trainer has ended (a time budget)


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


class ChatTaskConfig(BaseEnvConfig, DrawSettings):
    max_completion_tokens: int = Field(
        default=256,
        ge=1,
        description="Tokens sampled per reply (also capped by max_token_length).",
    )
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature for training rollouts.")
    eval_size: int = Field(
        default=32, ge=0, description="Items of the held-out set, scored (greedy) before the first step and at the end."
    )
    validation_size: int | None = Field(
        default=None,
        ge=0,
        description="Items drawn from the training pool (no longer trained on) as the validation set, scored "
        "every steps_per_eval steps: it picks the run's best checkpoint. null: eval_size; 0: no validation "
        "set (the periodic evaluations then score the held-out set).",
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
        size = cfg.eval_size if cfg.validation_size is None else cfg.validation_size
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
            await self._evaluate_on(self.validation_tasks, "validation")
            await self._evaluate_on(self.eval_tasks, "held_out")

    async def env_manager(self) -> None:
        """atroposlib returns once every step's rollouts are queued; the final weights come later, or
        before that where the run ends on its time budget (the trainer then serves them early)."""
        if not self.config.eval_at_end:  # (the tasks are not loaded yet: atroposlib's manager runs setup)
            await super().env_manager()
            return
        manager = asyncio.create_task(super().env_manager())
        watcher = asyncio.create_task(self._final_label_seen())
        await asyncio.wait({manager, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():  # the trainer ended first: no more rollouts
            for task in [manager, *self.workers]:
                task.cancel()
            await asyncio.gather(manager, return_exceptions=True)
        else:
            watcher.cancel()
            manager.result()
            if not await self._final_weights_served():
                return
        logger.info("%s: the trainer serves its final weights: the final evaluations", self.name)
        await self._final_evaluations()

    async def _final_evaluations(self) -> None:
        """The last weights on both sets (validation first: the trainer picks the best checkpoint once
        the held-out line is there), then the best checkpoint on the held-out set if the trainer serves it."""
        await self._evaluate_on(self.validation_tasks, "validation", final=True)
        await self._evaluate_on(self.eval_tasks, "held_out", final=True)
        if self.validation_tasks and self.eval_tasks and await self._label_after_final() == BEST_LABEL:
            await self._evaluate_on(self.eval_tasks, "held_out", final=True, checkpoint=BEST)

    async def _health(self, client: Any) -> dict[str, Any]:
        url = self.server.servers[0].config.base_url.removesuffix("/").removesuffix("/v1") + "/health"
        answer: dict[str, Any] = (await client.get(url)).json()
        return answer

    async def _final_label_seen(self) -> None:
        """Returns once the trainer serves its final weights (polled while the rollouts run)."""
        import httpx

        async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
            while True:
                try:
                    if (await self._health(client)).get("sampler") == FINAL_LABEL:
                        return
                except (httpx.HTTPError, ValueError):
                    pass
                await asyncio.sleep(FINAL_WATCH_S)

    async def _label_after_final(self, timeout_s: float = 600.0) -> str | None:
        """What the trainer serves once the final evaluations are written: `best` (its best checkpoint,
        for the held-out set), `done`, or None when it says neither in time or is gone."""
        return await self._wait_for_label((BEST_LABEL, DONE_LABEL), timeout_s)

    async def _served_weights(self) -> tuple[int | None, str | None]:
        """(the trainer's steps, the name of the weights it serves) from /health; (None, None) where
        the server is not the product's (a hosted endpoint)."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
                health = await self._health(client)
        except (httpx.HTTPError, ValueError):
            return None, None
        step = health.get("step")
        if not isinstance(step, int):
            return None, None
        return step, (BEST if health.get("sampler") == BEST_LABEL else health.get("weights"))

    async def _final_weights_served(self, timeout_s: float = 3600.0) -> bool:
        """Wait until the trainer serves its last weights (/health says `final`); False when it
        never does, or its server stays unreachable for 10 s (the trainer is gone)."""
        return await self._wait_for_label((FINAL_LABEL,), timeout_s) == FINAL_LABEL

    async def _wait_for_label(self, labels: tuple[str, ...], timeout_s: float) -> str | None:
        """The first of `labels` /health names within `timeout_s`; None on the timeout, or once the
        server has been unreachable for FINAL_UNREACHABLE_S (the trainer is gone)."""
        import httpx

        deadline = time.monotonic() + timeout_s
        reached = time.monotonic()  # when the trainer's server last answered
        async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
            while time.monotonic() < deadline and time.monotonic() - reached < FINAL_UNREACHABLE_S:
                try:
                    if (label := (await self._health(client)).get("sampler")) in labels:
                        return str(label)
                    reached = time.monotonic()
                except (httpx.HTTPError, ValueError):
                    pass
                await asyncio.sleep(FINAL_POLL_S)  # the final eval starts within this of the last step
        return None

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """The periodic evaluation (every steps_per_eval steps): the validation set where the
        environment has one, else the held-out set."""
        if self.validation_tasks:
            await self._evaluate_on(self.validation_tasks, "validation")
        else:
            await self._evaluate_on(self.eval_tasks, "held_out")

    async def _evaluate_on(
        self, tasks: list[Task], split: EvalSplit, *, final: bool = False, checkpoint: str | None = None
    ) -> None:
        """Greedy replies to `tasks`; one line appended to the split's file (docs/run-files.md)."""
        if not tasks or self.config.data_dir_to_save_evals is None:
            return
        files = RunFiles(Path(self.config.data_dir_to_save_evals))
        step, weights = await self._served_weights()
        if checkpoint == BEST:  # the weights the trainer picked by the same rule
            best = best_of(read_jsonl(files.validation))
            step, weights = (best.step, best.weights) if best else (step, None)
        elif step is None:  # not the product's server: the environment's own count
            step = self.config.total_steps if final else self.curr_step
        gate = asyncio.Semaphore(max(1, self.config.max_eval_workers))

        async def one(task: Task) -> Score:
            async with gate:
                return await self.score_greedy(task)

        started = time.monotonic()
        scores = await asyncio.gather(*(one(t) for t in tasks))
        record = {
            "step": step,
            "final": final,
            "time": time.time(),
            "seconds": round(time.monotonic() - started, 3),
            "eval_accuracy": sum(s.correct for s in scores) / len(scores),
            "eval_reward_mean": sum(s.reward for s in scores) / len(scores),
            "num_items": len(scores),
            "weights": weights,
            **({"checkpoint": checkpoint} if checkpoint else {}),
        }
        append_jsonl(files.validation if split == "validation" else files.evals, record)

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
