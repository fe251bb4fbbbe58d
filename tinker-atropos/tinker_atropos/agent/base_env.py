"""HermesAgentBaseEnv: multi-turn tool-calling environments, with Hermes' subclass contract.

A subclass implements `setup()`, `get_next_item()`, `format_prompt(item)`,
`compute_reward(item, result, ctx)` and `evaluate()`; this class runs the agent loop for each
rollout in its own sandbox, hands `compute_reward` a ToolContext on that still-open sandbox, and
turns the group into a ScoredDataGroup: tokens, masks, sampler logprobs (phase 2), scores, and
per-rollout overrides {"correct", "turns", "tool_calls", "tool_errors"} the trainer reports.

Porting a Hermes environment changes its imports only (docs/agentic-environments.md).
Extras beyond Hermes: `execute_tool()` (an environment's own tools next to the sandbox ones),
`prepare_sandbox()` (a task's starting files), `is_correct()`, `max_turn_tokens`, and
`evaluate_agent()` for a ready-made evaluate().
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import abstractmethod
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.type_definitions import Item
from pydantic import Field

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.loop import AgentResult, HermesAgentLoop, ToolHandler, tool_error
from tinker_atropos.agent.result_budget import (
    DEFAULT_PREVIEW_SIZE_CHARS,
    DEFAULT_RESULT_SIZE_CHARS,
    DEFAULT_TURN_BUDGET_CHARS,
    BudgetConfig,
)
from tinker_atropos.agent.sandboxes import SandboxConfig, resolve_backend
from tinker_atropos.agent.tool_calls import parse_tool_calls
from tinker_atropos.agent.tools import TOOL_SCHEMAS, ToolContext, ToolResult, select_tools
from tinker_atropos.agent.trajectory import format_trajectory
from tinker_atropos.environments.evaluations import EvalSplit
from tinker_atropos.environments.run_env import RunEnv
from tinker_atropos.item_draw.settings import DrawSettings
from tinker_atropos.run_files import finished_sft_state
from tinker_atropos.sft.settings import SftSettings

logger = logging.getLogger(__name__)


class HermesAgentEnvConfig(BaseEnvConfig, DrawSettings):
    """Hermes' agent settings (same names, same defaults) on top of BaseEnvConfig."""

    enabled_toolsets: list[str] | None = Field(
        default=None, description="Toolsets to enable (e.g. ['terminal', 'file']); None: all."
    )
    disabled_toolsets: list[str] | None = Field(default=None, description="Toolsets removed from enabled_toolsets.")
    distribution: str | None = Field(
        default=None,
        description="Hermes toolset distribution name (sampled per group); not available here: use enabled_toolsets.",
    )
    max_agent_turns: int = Field(
        default=30, ge=1, description="Maximum LLM calls (tool-calling iterations) per rollout."
    )
    system_prompt: str | None = Field(
        default=None, description="System prompt for the agent (tools are offered separately)."
    )
    agent_temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature for agent rollouts.")
    terminal_backend: str = Field(
        default="auto",
        description="Sandbox backend for tool calls: 'auto' (bwrap where it runs, else local with a warning), "
        "'bwrap', 'local' (no isolation) or 'docker'.",
    )
    terminal_read_only_paths: list[str] = Field(
        default_factory=list,
        description="bwrap: host paths the policy's commands may read, beyond the system directories.",
    )
    terminal_network: bool = Field(
        default=False, description="bwrap: give the policy's commands the host's network (else none)."
    )
    terminal_timeout: int = Field(
        default=120, ge=1, description="Per-command timeout in seconds for terminal tool calls."
    )
    terminal_lifetime: int = Field(default=3600, ge=1, description="Sandbox lifetime in seconds.")
    dataset_name: str | None = Field(
        default=None, description="Dataset name or local path; optional if tasks are inline."
    )
    dataset_split: str = Field(default="train", description="Dataset split to use.")
    prompt_field: str = Field(default="prompt", description="Dataset field holding the prompt.")
    tool_pool_size: int = Field(default=128, ge=1, description="Tool calls allowed to run at once across all rollouts.")
    tool_call_parser: str = Field(
        default="hermes",
        description="Parser for tool calls in raw model text (phase 2, and "
        "phase 1 servers that return no native tool_calls).",
    )
    extra_body: dict[str, Any] | None = Field(
        default=None,
        description="Extra body for chat.completions.create() (phase 1), e.g. OpenRouter provider preferences.",
    )
    max_turn_tokens: int | None = Field(
        default=None, ge=1, description="Tokens sampled per assistant turn; None: the rest of max_token_length."
    )
    demonstrations_per_group: int = Field(
        default=0,
        ge=0,
        description="Rollouts per group played from the environment's demonstration(item) instead of sampled "
        "(tools and reward stay real): a warm start for a small model that never calls a tool by itself. "
        "0 = pure RL.",
    )
    sft: SftSettings | None = Field(
        default=None,
        description="A supervised stage on the run's adapter before RL (tinker_atropos.sft: sources, budget, "
        "learning rate, stop rule, then): for a model that never writes a tool call by itself. null: none.",
    )
    eval_before_training: bool = Field(
        default=True,
        description="Run evaluate() on the base model (eval.jsonl step 0) before the first rollout of a fresh run.",
    )
    eval_at_end: bool = Field(
        default=False,
        description="Score the final weights on the held-out set (eval_items) once the trainer has taken its last "
        "step, and where the environment has validation_items, the best checkpoint by them too (the trainer waits).",
    )
    default_result_size_chars: int = Field(
        default=DEFAULT_RESULT_SIZE_CHARS,
        ge=1,
        description="A tool result longer than this (chars) is saved in the sandbox and replaced by a preview.",
    )
    turn_budget_chars: int = Field(
        default=DEFAULT_TURN_BUDGET_CHARS,
        ge=1,
        description="All tool results of one turn together (chars); over it, the largest are saved first.",
    )
    preview_size_chars: int = Field(
        default=DEFAULT_PREVIEW_SIZE_CHARS, ge=0, description="Chars of a saved tool result shown inline."
    )
    tool_result_overrides: dict[str, int] | None = Field(
        default=None, description="Per-tool thresholds (chars), e.g. {'terminal': 10000}; read_file is never saved."
    )

    def build_budget_config(self) -> BudgetConfig:
        """Hermes' tool-result budget from these fields (`HermesAgentLoop(budget_config=...)`)."""
        return BudgetConfig(
            default_result_size=self.default_result_size_chars,
            turn_budget=self.turn_budget_chars,
            preview_size=self.preview_size_chars,
            tool_overrides=dict(self.tool_result_overrides or {}),
        )


class HermesAgentBaseEnv(RunEnv):
    """Abstract base of tool-calling environments (not an environment by itself)."""

    name: str | None = "hermes-agent"
    env_config_cls = HermesAgentEnvConfig
    _format_trajectory_for_display = staticmethod(format_trajectory)  # Hermes' name for it

    def __init__(
        self, config: HermesAgentEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False
    ) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: HermesAgentEnvConfig = config
        parse_tool_calls("", config.tool_call_parser)  # an unknown parser fails here, listing the known
        if config.distribution:
            raise ValueError("distribution is not supported here: list toolsets in enabled_toolsets")
        resolve_backend(config.terminal_backend)  # an unknown one fails now; auto's fallback is logged now
        self.sandbox_config = SandboxConfig(
            backend=config.terminal_backend,
            timeout_s=config.terminal_timeout,
            lifetime_s=config.terminal_lifetime,
            ro_paths=tuple(config.terminal_read_only_paths),
            network=config.terminal_network,
        )
        task_sandboxes.configure(self.sandbox_config, config.tool_pool_size)
        self._current_group_tools: tuple[list[dict[str, Any]], set[str]] | None = None
        self._tool_error_buffer: list[dict[str, Any]] = []
        self._agent_stats: list[tuple[int, int, int]] = []  # (turns, tool calls, tool errors)
        self.eval_tags: dict[str, Any] = {}  # added to each eval.jsonl line (the supervised stage's)
        self.train_items: list[Any] = []  # what get_next_item draws from (setup() fills it)
        self.validation_items: list[Any] = []  # the validation set, where setup() draws one

    # --- tools ---------------------------------------------------------------------------

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        """(tool schemas, valid names) offered to every rollout of a group."""
        names = select_tools(self.config.enabled_toolsets, self.config.disabled_toolsets)
        return [TOOL_SCHEMAS[n] for n in names], set(names)

    async def execute_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run one tool call; override to serve tools of your own, else the sandbox's."""
        return await ctx.call(name, arguments)

    async def prepare_sandbox(self, item: Item, ctx: ToolContext) -> None:
        """Put the task's starting files in a rollout's fresh sandbox (default: nothing)."""

    async def _guarded_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        async with task_sandboxes.settings.tool_slots:
            try:
                return await self.execute_tool(name, arguments, ctx)
            except Exception as exc:
                return tool_error(f"{name}: {type(exc).__name__}: {exc}")

    # --- rollouts ------------------------------------------------------------------------

    def _use_managed_server(self) -> bool:
        """Phase 2 (exact tokens) unless the server is an OpenAI chat endpoint (phase 1)."""
        return bool(self.server.servers) and not isinstance(self.server.servers[0], OpenAIServer)

    def initial_messages(self, item: Item) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages.append({"role": "user", "content": self.format_prompt(item)})
        return messages

    def demonstration(self, item: Item) -> list[str] | None:
        """An expert's assistant turns for `item` (raw text, tool calls in the parser's format), for
        `demonstrations_per_group`; None when the environment has none."""
        return None

    def loop_settings(
        self, task_id: str, tool_handler: ToolHandler, *, split: str = "train", temperature: float | None = None
    ) -> dict[str, Any]:
        """The agent loop's settings for one rollout of this environment: the same for a sampled
        rollout, a demonstration and a supervised example (tinker_atropos.sft), so all render alike."""
        tools, valid = self._current_group_tools or self._resolve_tools_for_group()
        return dict(
            tool_schemas=tools,
            valid_tool_names=valid,
            max_turns=self.config.max_agent_turns,
            task_id=task_id,
            temperature=self.config.agent_temperature if temperature is None else temperature,
            max_tokens=self.config.max_turn_tokens,
            extra_body=self.config.extra_body,
            budget_config=self.config.build_budget_config(),
            tool_handler=tool_handler,
            tokenizer=self.tokenizer,
            max_context=self.config.max_token_length,
            tool_call_parser=self.config.tool_call_parser,
            split=split,
        )

    async def rollout(
        self,
        item: Item,
        *,
        split: str = "train",
        temperature: float | None = None,
        demonstration: list[str] | None = None,
    ) -> tuple[AgentResult, float]:
        """One conversation in a fresh sandbox, scored while the sandbox is still open."""
        task_id = uuid.uuid4().hex
        async with task_sandboxes.task_sandbox(task_id):
            ctx = ToolContext(task_id)
            await self.prepare_sandbox(item, ctx)
            loop_kwargs = self.loop_settings(
                task_id, lambda name, args: self._guarded_tool(name, args, ctx), split=split, temperature=temperature
            )
            if demonstration is not None:
                result = await HermesAgentLoop(server=None, demonstration=demonstration, **loop_kwargs).run(
                    self.initial_messages(item)
                )
            elif self._use_managed_server():
                async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
                    result = await HermesAgentLoop(server=managed, **loop_kwargs).run(self.initial_messages(item))
            else:
                result = await HermesAgentLoop(server=self.server, **loop_kwargs).run(self.initial_messages(item))
            if result.turns_used == 0:
                return result, 0.0  # nothing was produced: nothing to verify
            try:
                reward = float(await self.compute_reward(item, result, ctx))
            except Exception as exc:
                logger.error("compute_reward failed: %s", exc)
                reward = 0.0
        return result, reward

    async def collect_trajectory(
        self, item: Item, demonstration: list[str] | None = None
    ) -> tuple[dict[str, Any] | None, list[Item]]:
        result, reward = await self.rollout(item, demonstration=demonstration)
        for err in result.tool_errors:
            self._tool_error_buffer.append(
                {"turn": err.turn, "tool": err.tool_name, "args": err.arguments[:150], "error": err.error[:300]}
            )
        self._agent_stats.append((result.turns_used, result.tool_calls, len(result.tool_errors)))
        trace = result.trace
        scored: dict[str, Any] = {
            "tokens": trace.tokens,
            "masks": trace.masks,
            "scores": reward,
            "inference_logprobs": trace.logprobs,
            "messages": _plain_messages(result.messages),
            "overrides": {
                "correct": bool(self.is_correct(item, result, reward)),
                "turns": result.turns_used,
                "tool_calls": result.tool_calls,
                "tool_errors": len(result.tool_errors),
            },
        }
        if extra := self.episode_metrics(result):
            scored["overrides"]["env_metrics"] = extra  # each one's mean goes in the step's metrics line
        return scored, []

    def episode_metrics(self, result: AgentResult) -> dict[str, float]:
        """Figures of one rollout the run's metrics should average (default: none)."""
        return {}

    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        """Tools resolved once per group, rollouts in parallel, one ScoredDataGroup (with the
        sampler logprobs, which BaseEnv's default assembly would drop)."""
        self._current_group_tools = self._resolve_tools_for_group()
        demos = self.config.demonstrations_per_group
        demo = self.demonstration(item) if demos else None
        scripts = [demo if demo is not None and k < demos else None for k in self.group_replies]
        results = await asyncio.gather(*(self.collect_trajectory(item, script) for script in scripts))
        items = [r[0] for r in results if r[0] is not None]
        if not items:
            return None, []
        group = ScoredDataGroup(
            tokens=[s["tokens"] for s in items],
            masks=[s["masks"] for s in items],
            scores=[s["scores"] for s in items],
            overrides=[s.get("overrides") or {} for s in items],
        )
        if all(s.get("messages") for s in items):
            group["messages"] = [s["messages"] for s in items]
        if any(s.get("inference_logprobs") is not None for s in items):
            # a demonstration has none (empty: the trainer scores just that sequence)
            group["inference_logprobs"] = [s.get("inference_logprobs") or [] for s in items]
        return group, [b for r in results for b in r[1]]

    def is_correct(self, item: Item, result: AgentResult, reward: float) -> bool:
        """What percent_correct counts; override when full reward is not the criterion."""
        return reward >= 1.0

    async def register_env(self) -> None:
        """Registered: on a fresh run, the base model's score comes first (eval.jsonl step 0)."""
        await super().register_env()
        if self.config.eval_before_training and self.curr_step == 0 and not self._evaluated_by_sft():
            await (self.evaluate_both() if self.validation_items else self.evaluate())

    def _evaluated_by_sft(self) -> bool:
        """The run's supervised stage evaluated the weights RL starts from, as its last act."""
        run_dir = self.config.data_dir_to_save_evals
        return bool(self.config.sft and run_dir and finished_sft_state(Path(run_dir)))

    # --- evaluation helper -----------------------------------------------------------------

    def validation_set(self) -> list[Any]:
        return self.validation_items

    def held_out_set(self) -> list[Any]:
        return list(getattr(self, "eval_items", None) or [])

    async def evaluate_set(
        self, items: list[Any], split: EvalSplit, *, final: bool = False, checkpoint: str | None = None
    ) -> None:
        if items:
            await self.evaluate_agent(items, split=split, final=final, checkpoint=checkpoint)

    async def evaluate_agent(
        self,
        items: list[Item],
        temperature: float = 0.0,
        *,
        split: EvalSplit = "held_out",
        final: bool = False,
        checkpoint: str | None = None,
    ) -> dict[str, Any]:
        """Roll out `items` (eval split), append one line to the split's file (eval.jsonl for the
        held-out set, validation.jsonl), return it."""
        target = await self.evaluation_target(final, checkpoint)
        gate = asyncio.Semaphore(max(1, self.config.max_eval_workers))
        self._current_group_tools = self._resolve_tools_for_group()

        async def one(item: Item) -> tuple[AgentResult, float, bool]:
            async with gate:
                result, reward = await self.rollout(item, split="eval", temperature=temperature)
            return result, reward, self.is_correct(item, result, reward)

        started = time.monotonic()
        done = await asyncio.gather(*(one(i) for i in items))
        n = max(len(done), 1)
        record = {
            "seconds": round(time.monotonic() - started, 3),
            "eval_accuracy": sum(c for _, _, c in done) / n,
            "eval_reward_mean": sum(r for _, r, _ in done) / n,
            "eval_agent_turns_mean": sum(res.turns_used for res, _, _ in done) / n,
            # the behaviour an agent environment trains: rollouts that made a well-formed tool call
            "eval_tool_call_share": sum(_parsed_calls(res) > 0 for res, _, _ in done) / n,
            "num_items": len(done),
            **self.eval_tags,
        }
        return self.write_evaluation(split, target, record, final, checkpoint)

    # --- logging -------------------------------------------------------------------------

    async def add_rollouts_for_wandb(self, scored_data: Any, item: Item = None) -> None:
        """Rollout tables show the formatted trajectory, tool calls included."""
        keep = self.config.num_rollouts_per_group_for_logging
        keep = self.config.group_size if keep == -1 else keep
        messages = scored_data.get("messages") or []
        rows = [
            (
                format_trajectory(messages[i])
                if i < len(messages)
                else self.tokenizer.decode(scored_data["tokens"][i]),
                scored_data["scores"][i],
            )
            for i in range(min(keep, len(scored_data.get("scores", []))))
        ]
        self.rollouts_for_wandb.append(rows)
        if len(self.rollouts_for_wandb) > self.config.num_rollouts_to_keep:
            self.rollouts_for_wandb.pop(0)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = dict(wandb_metrics or {})
        metrics["train/tool_errors_count"] = len(self._tool_error_buffer)
        for err in self._tool_error_buffer:
            logger.info("tool error [turn %s] %s(%s) -> %s", err["turn"], err["tool"], err["args"], err["error"])
        if self._agent_stats:
            n = len(self._agent_stats)
            metrics["train/agent_turns_mean"] = sum(s[0] for s in self._agent_stats) / n
            metrics["train/agent_tool_calls_mean"] = sum(s[1] for s in self._agent_stats) / n
        self._tool_error_buffer, self._agent_stats = [], []
        await super().wandb_log(metrics)

    async def close(self) -> None:
        """Release what setup() started (an environment's own servers or sessions); default: nothing.
        A process that ends without it still takes them along (they die with it)."""

    # --- what a subclass implements ----------------------------------------------------------

    @abstractmethod
    async def setup(self) -> None:
        """Load the dataset, initialise state."""

    async def get_next_item(self) -> Item | None:
        """The next item to roll out: by the product's draw over `self.train_items` (setup() fills it),
        or override it with an order of your own (the draw then only counts what the groups say)."""
        return self.draw_from(self.train_items)

    @abstractmethod
    def format_prompt(self, item: Item) -> str:
        """The user message that poses `item`."""

    @abstractmethod
    async def compute_reward(self, item: Item, result: AgentResult, ctx: ToolContext) -> float:
        """Score the rollout; `ctx` runs tools in the rollout's own, still open, sandbox."""

    @abstractmethod
    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Periodic evaluation (every steps_per_eval steps); `evaluate_agent()` does the work."""


def _parsed_calls(result: AgentResult) -> int:
    """Tool calls that parsed (a name and JSON arguments), whether or not the tool then failed."""
    return result.tool_calls - sum(1 for e in result.tool_errors if not e.tool_name)


def _plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as run-api accepts them: role and a string content on every one."""
    return [{**m, "content": m.get("content") or ""} for m in messages]
