"""openenv: an OpenEnv environment (a folder `openenv init` made, or a running server by URL), trained
like any agent environment; listed as `openenv:<name>`.

Each rollout is one episode on a WebSocket session of its own: `reset` with the item's arguments
(its observation is the first user message), then one `step` per tool call of the model, until the
environment says `done` or the turn limit. An MCP environment's tools come from `list_tools`, each
call a `call_tool` step; a typed environment's action is offered as one tool, `step`, whose
parameters are the action's JSON schema (an action that does not validate goes back to the model as
the error). The reward is the episode's step rewards, summed. See docs/environments.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.loop import AgentResult, tool_error
from tinker_atropos.agent.tools import ToolContext, ToolResult
from tinker_atropos.environments.common import served_tools_config
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.mcp_tools.tasks import split_tasks
from tinker_atropos.mcp_tools.tool_policy import ToolInfo
from tinker_atropos.openenv import EPISODE_DONE
from tinker_atropos.openenv import servers as served
from tinker_atropos.openenv.folder import read_openenv_folder
from tinker_atropos.openenv.items import EpisodeItem, read_items, served_items
from tinker_atropos.openenv.wire import Episode, OpenEnvError, ServerGone, StepResult, open_episode
from tinker_atropos.run_files import RunFiles
from tinker_atropos.venvs import OPENENV

ACTION_TOOL = "step"
SYSTEM_PROMPT = (
    "You act in an environment through its tools. Call a tool to act; read each result before the next call."
)


class OpenEnvConfig(HermesAgentEnvConfig):
    openenv_folder: str | None = Field(
        default=None, description="The environment's folder (holds openenv.yaml; set when openenv:<name> is selected)."
    )
    openenv_url: str | None = Field(
        default=None, description="A running OpenEnv server's base URL, instead of a folder (the user's own server)."
    )
    openenv_python: str | None = Field(
        default=None,
        description="The Python that serves the folder (its venv; set by the server). None: `make openenv`'s.",
    )
    items_file: str | None = Field(
        default=None,
        description='A JSONL of episodes: {"reset": {reset()\'s arguments}, "prompt": optional text, "split": '
        "optional train|eval}. None: the environment's own Task API, else `seed_items` seeds.",
    )
    seed_items: int = Field(
        default=64, ge=2, le=100_000, description="No items file nor Task API: episodes reset with seeds 0..N-1."
    )
    eval_fraction: float = Field(default=0.25, ge=0.0, lt=1.0, description="Share of items held out for evaluation.")
    seed: int = Field(default=0, description="Shuffles the items before the train/eval split.")
    success_reward: float = Field(
        default=1.0, description="An episode whose summed reward reaches this counts as correct (accuracy)."
    )
    step_timeout_s: float = Field(default=30.0, gt=0, le=1800, description="Seconds one reset or step may take.")
    server_start_timeout_s: float = Field(
        default=120.0, gt=0, le=1800, description="Seconds a server may take to answer /health."
    )
    max_concurrent_sessions: int = Field(
        default=8, ge=1, le=256, description="Episodes open at once (the server's sessions)."
    )


@dataclass
class EpisodeState:
    """One rollout's episode: its session, first observation, rewards so far and whether it ended."""

    episode: Episode
    first: StepResult
    rewards: list[float] = field(default_factory=list)
    done: bool = False
    gone: str | None = None  # the connection was lost mid-episode: the rollout fails with this


_CURRENT: contextvars.ContextVar[EpisodeState | None] = contextvars.ContextVar("openenv_episode", default=None)


def observation_text(observation: dict[str, Any]) -> str:
    """What the model reads of an observation: its one text field, else its fields as JSON (empty
    fields left out, and `metadata` unless nothing else is there)."""
    fields = {k: v for k, v in observation.items() if k != "metadata" and v not in (None, "", [], {})}
    fields = fields or dict(observation.get("metadata") or {})  # a bare Observation says it all in its metadata
    if len(fields) == 1 and isinstance(next(iter(fields.values())), str):
        return str(next(iter(fields.values())))
    return json.dumps(fields, ensure_ascii=False, default=str)


def mcp_result_text(observation: dict[str, Any]) -> tuple[str, bool]:
    """A `call_tool` observation's result (text content joined) and whether it is an error."""
    error = observation.get("error")
    if error:
        return (error.get("message") if isinstance(error, dict) else str(error)) or "tool error", True
    result = observation.get("result")
    if isinstance(result, dict):
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        if texts:
            return "\n".join(texts), bool(result.get("is_error") or result.get("isError"))
        return json.dumps(result.get("data", result), ensure_ascii=False, default=str), False
    return json.dumps(result, ensure_ascii=False, default=str), False


def action_tool(schema: dict[str, Any]) -> ToolInfo:
    """A typed environment's action as one tool: the action's JSON schema less its `metadata`."""
    params = dict(schema)
    props = {k: v for k, v in (params.get("properties") or {}).items() if k != "metadata"}
    params["properties"] = props
    params["required"] = [r for r in params.get("required") or [] if r in props]
    params.pop("title", None)
    description = str(schema.get("description") or "Take one action in the environment.")
    return ToolInfo(ACTION_TOOL, description.strip(), params)


class OpenEnvEnv(HermesAgentBaseEnv):
    """Train a model on an OpenEnv environment (each listed as openenv:<name>)."""

    name = "openenv"
    env_config_cls = OpenEnvConfig

    @classmethod
    def config_init(cls) -> tuple[OpenEnvConfig, list[APIServerConfig]]:
        return served_tools_config(OpenEnvConfig, cls.name, SYSTEM_PROMPT, max_agent_turns=4)

    @property
    def cfg(self) -> OpenEnvConfig:
        return self.config  # type: ignore[return-value]

    async def setup(self) -> None:
        cfg = self.cfg
        sessions = cfg.max_concurrent_sessions
        self.servers: list[served.Server] = []
        try:
            if cfg.openenv_url:
                self.servers = [
                    await served.given_server(cfg.openenv_url, cfg.openenv_url, sessions, cfg.server_start_timeout_s)
                ]
            elif cfg.openenv_folder:
                folder = read_openenv_folder(Path(cfg.openenv_folder))
                python = cfg.openenv_python or str(OPENENV.python(os.environ))
                self.servers = await served.start_servers(
                    python, folder, sessions, self._log_dir(), cfg.server_start_timeout_s
                )
            else:
                raise ValueError(
                    "openenv runs one environment: select openenv:<name> (rl_list_environments lists them)"
                )
            self.slots = served.Slots(self.servers)
            base = self.servers[0].url
            items = await self._items(base)
            self.train_items, self.eval_items = split_tasks(items, cfg.eval_fraction, cfg.seed)
            self.offered = await self._discover_tools(base, items[0])
        except BaseException:
            await self.close()
            raise

    def _log_dir(self) -> Path:
        """The run's logs folder; outside a run (a test, a script) a temporary one, removed by close():
        a server's failure carries its log's tail, so nothing is lost with the folder."""
        if self.config.data_dir_to_save_evals:
            logs = RunFiles(Path(self.config.data_dir_to_save_evals)).logs_dir
            logs.mkdir(parents=True, exist_ok=True)
            return logs
        self.temp_logs = Path(tempfile.mkdtemp(prefix="openenv-logs-"))
        return self.temp_logs

    async def _items(self, base: str) -> list[EpisodeItem]:
        if self.cfg.items_file:
            return read_items(Path(self.cfg.items_file).expanduser())
        try:
            listed = await served_items(base, self.cfg.step_timeout_s)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            listed = None
        return listed or [EpisodeItem(f"seed {i}", {"seed": i}) for i in range(self.cfg.seed_items)]

    async def _discover_tools(self, base: str, item: EpisodeItem) -> list[ToolInfo]:
        """An MCP environment's tools (`list_tools` answers), else the typed action as one tool."""
        async with open_episode(
            base, item.reset, timeout_s=self.cfg.step_timeout_s, capacity_wait_s=self.cfg.server_start_timeout_s
        ) as (episode, _):
            try:
                listed = await episode.step({"type": "list_tools"})
            except OpenEnvError:
                listed = None
        if listed is not None and isinstance(listed.observation.get("tools"), list):
            self.mcp = True
            return [
                ToolInfo(t["name"], t.get("description") or "", t.get("input_schema") or t.get("inputSchema") or {})
                for t in listed.observation["tools"]
            ]
        self.mcp = False
        async with httpx.AsyncClient(timeout=self.cfg.step_timeout_s, trust_env=False, verify=shared_tls()) as client:
            answer = await client.get(f"{base}/schema")
        schema = answer.json().get("action") if answer.status_code == 200 else None
        if not isinstance(schema, dict):
            raise OpenEnvError(
                f"the OpenEnv server at {base} answers neither list_tools nor /schema (HTTP {answer.status_code}): "
                "it offers the model nothing to act with"
            )
        return [action_tool(schema)]

    def format_prompt(self, item: EpisodeItem) -> str:
        state = _CURRENT.get()
        seen = observation_text(state.first.observation) if state is not None else ""
        return "\n\n".join(part for part in (item.prompt, seen) if part)

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        return [t.schema() for t in self.offered], {t.name for t in self.offered}

    async def rollout(self, item: EpisodeItem, **kwargs: Any) -> tuple[AgentResult, float]:
        """The base rollout inside one episode of its own, on a free session (given back however it ends)."""
        server = await self.slots.take()
        try:
            async with open_episode(
                server.url, item.reset, timeout_s=self.cfg.step_timeout_s, capacity_wait_s=self.cfg.step_timeout_s
            ) as (episode, first):
                state = EpisodeState(episode, first)
                token = _CURRENT.set(state)
                try:
                    rolled = await super().rollout(item, **kwargs)
                finally:
                    _CURRENT.reset(token)
                if state.gone is not None:
                    raise ServerGone(state.gone)
                return rolled
        except ServerGone as exc:
            await asyncio.sleep(0.2)  # a dying server's exit code lands
            raise OpenEnvError(server.died() or str(exc)) from None
        finally:
            self.slots.give_back(server)

    async def execute_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        state = _CURRENT.get()
        if state is None:
            raise RuntimeError("an OpenEnv tool was called outside an episode")
        if state.done:
            return tool_error("the episode is over")
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments} if self.mcp else arguments
        try:
            step = await state.episode.step(action)
        except ServerGone as exc:
            state.gone = str(exc)
            return tool_error(f"{name}: the environment's server is gone")
        except OpenEnvError as exc:  # an action the environment refuses: the model reads why
            return tool_error(f"{name}: {exc}")
        state.rewards.append(step.reward or 0.0)
        state.done = step.done
        text, error = mcp_result_text(step.observation) if self.mcp else (observation_text(step.observation), False)
        return ToolResult(text, error=error, ends_episode=step.done)

    async def compute_reward(self, item: EpisodeItem, result: AgentResult, ctx: ToolContext) -> float:
        state = _CURRENT.get()
        return float(sum(state.rewards)) if state is not None else 0.0

    def episode_metrics(self, result: AgentResult) -> dict[str, float]:
        """Whether the environment ended the episode (`done`) rather than the turn limit or the model:
        a server that never says `done` is a finding (rl_mcp/diagnosis/openenv_rules.py)."""
        return {EPISODE_DONE: float(result.stop_reason == "done")}

    def is_correct(self, item: EpisodeItem, result: AgentResult, reward: float) -> bool:
        return reward >= self.cfg.success_reward

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.evaluate_agent(self.eval_items)

    async def close(self) -> None:
        await served.stop_all(getattr(self, "servers", []))
        temp_logs: Path | None = getattr(self, "temp_logs", None)
        if temp_logs is not None:
            shutil.rmtree(temp_logs, ignore_errors=True)


if __name__ == "__main__":
    OpenEnvEnv.cli()
