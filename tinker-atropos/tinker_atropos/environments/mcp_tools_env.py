"""mcp_tools: train a model to use one of the user's own MCP tool servers (listed as `mcp:<name>`).

Every tool call of a rollout is a real MCP `tools/call` on a session of its own (a fresh stdio
process per rollout unless the server is declared stateless); its result, or its error, goes back
to the model as a tool message. Tasks come from a JSONL file (tinker_atropos/mcp_tools/tasks.py);
the reward is the task's check with partial credit for a correct call, or a judge model's relative
scores of the group (`reward: judge`). See docs/mcp-tools.md.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal

from atroposlib.envs.base import APIServerConfig, ScoredDataGroup
from pydantic import Field

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.agent.loop import AgentResult, tool_error
from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call, new_call_id
from tinker_atropos.agent.tools import ToolContext, ToolResult
from tinker_atropos.environments.common import served_tools_config
from tinker_atropos.mcp_tools import checks, rollout_sessions
from tinker_atropos.mcp_tools.judge import judge_group
from tinker_atropos.mcp_tools.servers_file import ServerSpec, find_server
from tinker_atropos.mcp_tools.sessions import list_tools, open_session
from tinker_atropos.mcp_tools.tasks import Task, read_tasks, split_tasks
from tinker_atropos.mcp_tools.tool_policy import ToolInfo, allowed_tools, refuse_unenabled
from tinker_atropos.run_files import RunFiles, append_jsonl

SYSTEM_PROMPT = (
    "You can call tools. When a tool can answer, call it, then state the answer from its result in one short sentence."
)


class McpToolsConfig(HermesAgentEnvConfig):
    mcp_server: str = Field(default="", description="The tool server (set when mcp:<name> is selected).")
    tool_servers_file: str | None = Field(default=None, description="The tool-servers file (set by the server).")
    default_tasks_file: str | None = Field(
        default=None, description="Where rl_write_mcp_tasks saves this server's tasks (set by the server)."
    )
    tools: list[str] | None = Field(
        default=None,
        description="The tools a rollout may call, by name ('*': every tool not destructive or unannotated). "
        "None: the tools the server annotates read-only. A destructive tool is enabled only when named here.",
    )
    tasks_file: str | None = Field(
        default=None, description="A JSONL tasks file (prompt, answer, check); None: the one rl_write_mcp_tasks saved."
    )
    eval_fraction: float = Field(default=0.25, ge=0.0, lt=1.0, description="Share of tasks held out for evaluation.")
    reward: Literal["check", "judge"] = Field(
        default="check",
        description="check: each task's check (partial credit for a correct call); judge: a judge "
        "model scores each group's rollouts relative to each other (RULER-style).",
    )
    partial_credit: float = Field(
        default=0.3, ge=0.0, le=1.0, description="check: the reward of a correct tool call when the check fails."
    )
    judge_base_url: str | None = Field(
        default=None, description="judge: an OpenAI-compatible base URL (…/v1); None: this run's own inference server."
    )
    judge_model: str | None = Field(default=None, description="judge: the model name; None: this run's model.")
    judge_api_key_var: str | None = Field(
        default=None,
        description="judge: the NAME of the environment variable holding its key (the operator sets it; never echoed).",
        pattern=r"^[A-Z_][A-Z0-9_]*$",
    )
    judge_rubric: str = Field(default="", description="judge: your own criteria, added to the default rubric.")
    judge_timeout_s: float = Field(default=120.0, gt=0, le=1800, description="judge: seconds for one group's verdict.")
    tool_timeout_s: float = Field(default=30.0, gt=0, le=600, description="Seconds one tools/call may take.")
    max_tool_result_chars: int = Field(
        default=4000, ge=100, le=200_000, description="A tool result is cut to this many characters."
    )
    server_start_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="Seconds a server may take to start and answer initialize."
    )
    sandbox: Literal["none", "bwrap"] = Field(
        default="none", description="bwrap: stdio servers run in bubblewrap (system read-only, no network)."
    )
    max_concurrent_sessions: int = Field(default=4, ge=1, le=64, description="Server sessions open at once.")
    seed: int = Field(default=0, description="Shuffles the tasks before the train/eval split.")
    stateless: bool | None = Field(
        default=None,
        description="One session for all rollouts (True) or one per rollout; None: as the servers file says.",
    )


class McpToolsEnv(HermesAgentBaseEnv):
    """Train a model to use an MCP tool server's tools (each listed as mcp:<server>)."""

    name = "mcp_tools"
    env_config_cls = McpToolsConfig

    @classmethod
    def config_init(cls) -> tuple[McpToolsConfig, list[APIServerConfig]]:
        return served_tools_config(McpToolsConfig, cls.name, SYSTEM_PROMPT)

    @property
    def cfg(self) -> McpToolsConfig:
        return self.config  # type: ignore[return-value]

    def _spec(self) -> ServerSpec:
        cfg = self.cfg
        if not cfg.mcp_server or not cfg.tool_servers_file:
            raise ValueError("mcp_tools runs one tool server: select mcp:<name> (rl_list_environments lists them)")
        spec = find_server(Path(cfg.tool_servers_file), cfg.mcp_server)
        if cfg.stateless is not None:
            spec = ServerSpec(**{**spec.__dict__, "stateless": cfg.stateless})
        return spec

    def _tasks_path(self) -> Path:
        named = self.cfg.tasks_file or self.cfg.default_tasks_file
        if not named:
            raise ValueError("no tasks: set `tasks_file`, or write tasks with rl_write_mcp_tasks")
        return Path(named).expanduser()

    async def setup(self) -> None:
        cfg = self.cfg
        self.spec = self._spec()
        tasks = read_tasks(self._tasks_path())  # refused before any server starts
        async with open_session(self.spec, start_timeout_s=cfg.server_start_timeout_s, sandbox=cfg.sandbox) as s:
            self.server_tools: list[ToolInfo] = await asyncio.wait_for(list_tools(s), cfg.server_start_timeout_s)
        self.allowed = allowed_tools(self.server_tools, cfg.tools, cfg.mcp_server)
        for task in tasks:
            refuse_unenabled(task.tools_needed(), self.server_tools, self.allowed, cfg.mcp_server)
        if not self.allowed.names:
            raise ValueError(f"no tool is enabled for server {cfg.mcp_server!r}: {self.allowed.note}")
        self.train_items, self.eval_items = split_tasks(tasks, cfg.eval_fraction, cfg.seed)
        self._refuse_prompts_past_context(tasks)
        self.session_settings = rollout_sessions.SessionSettings(
            self.spec, cfg.server_start_timeout_s, cfg.tool_timeout_s, cfg.max_tool_result_chars, cfg.sandbox
        )
        self._gate = asyncio.Semaphore(cfg.max_concurrent_sessions)
        self._shared = rollout_sessions.SharedSession(self.session_settings) if self.spec.stateless else None
        self.verdicts: list[checks.Verdict] = []

    def _refuse_prompts_past_context(self, tasks: list[Task]) -> None:
        """A tool prompt that leaves no room for a reply makes every rollout end before its first
        turn (scored 0, silently): refused here, with the length that fits."""
        if self.tokenizer is None:
            return
        scaffold = ChatScaffold(self.tokenizer, self._resolve_tools_for_group()[0])
        longest = max(len(scaffold.prompt_tokens(self.initial_messages(t))) for t in tasks)
        reply = self.cfg.max_turn_tokens or 64
        if longest + reply > self.cfg.max_token_length:
            need = -(-(longest + 2 * reply) // 256) * 256
            raise ValueError(
                f"the prompt of server {self.cfg.mcp_server!r} ({len(self.allowed.names)} tools offered, their schemas "
                f"included) takes {longest} tokens, leaving no room for a {reply}-token reply under max_token_length "
                f"{self.cfg.max_token_length}: raise max_token_length to at least {need}, or offer fewer `tools`"
            )

    def format_prompt(self, item: Task) -> str:
        return item.prompt

    def demonstration(self, item: Task) -> list[str] | None:
        """A `called` task with its arguments can be shown (`demonstrations_per_group`): the call, then
        the task's answer; a small model that never writes a tool call sees the format it is paid for."""
        check = item.check
        if check.kind != "called" or not check.tool or not check.arguments:
            return None
        call = ToolCall(check.tool, dict(check.arguments), new_call_id())
        return [format_tool_call(call), item.answer or "Done."]

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        enabled = [t for t in self.server_tools if t.name in self.allowed.names]
        return [t.schema() for t in enabled], {t.name for t in enabled}

    async def rollout(self, item: Task, **kwargs: Any) -> tuple[AgentResult, float]:
        """The base rollout, inside this rollout's own MCP session (closed however it ends)."""
        async with rollout_sessions.rollout_session(self.session_settings, self._gate, self._shared):
            return await super().rollout(item, **kwargs)

    async def execute_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if name not in self.allowed.names:  # the loop checks the offered names; this is the policy's own check
            return tool_error(f"tool {name!r} is not enabled for this run")
        outcome = await rollout_sessions.current().call(name, arguments)
        return ToolResult(outcome.text, error=outcome.error)

    async def compute_reward(self, item: Task, result: AgentResult, ctx: ToolContext) -> float:
        return checks.score(item, result.messages, self.cfg.partial_credit).reward

    def is_correct(self, item: Task, result: AgentResult, reward: float) -> bool:
        return checks.score(item, result.messages, 0.0).passed

    async def collect_trajectories(self, item: Task) -> tuple[ScoredDataGroup | None, list[Any]]:
        """The group scored by the checks, or by the judge (`reward: judge`); each rollout's one-line
        reason in its overrides (rl_test_inference shows them) and the group's in verdicts.jsonl."""
        group, backlog = await super().collect_trajectories(item)
        if group is None:
            return group, backlog
        transcripts = group.get("messages") or []
        if self.cfg.reward == "judge":
            verdicts = await judge_group(self.cfg, self._judge_default_url(), item, transcripts)
            group["scores"] = [v.reward for v in verdicts]
        else:
            verdicts = [checks.score(item, m, self.cfg.partial_credit) for m in transcripts]
        for override, verdict in zip(group["overrides"], verdicts):
            override["reason"] = f"{self.cfg.reward}: {verdict.reason}"
        self.verdicts.extend(verdicts)
        if self.config.data_dir_to_save_evals:
            line = {
                "time": time.time(),
                "step": self.curr_step,
                "prompt": item.prompt[:200],
                "reward": self.cfg.reward,
                "scores": list(group["scores"]),
                "reasons": [v.reason for v in verdicts],
            }
            append_jsonl(RunFiles(Path(self.config.data_dir_to_save_evals)).verdicts, line)
        return group, backlog

    def _judge_default_url(self) -> tuple[str, str]:
        """This run's own inference server and model: the judge when none is named."""
        first = self.server.servers[0].config
        return str(first.base_url), str(first.model_name)

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.evaluate_agent(self.eval_items)

    async def close(self) -> None:
        if getattr(self, "_shared", None) is not None:
            await self._shared.aclose()  # type: ignore[union-attr]


if __name__ == "__main__":
    McpToolsEnv.cli()
