"""openenv: an OpenEnv environment (a folder `openenv init` made, or a running server by URL), trained
like any agent environment; listed as `openenv:<name>`.

Each rollout is one episode on a WebSocket session of its own: `reset` with the item's arguments
(its observation is the first user message), then one `step` per action of the model, until the
environment says `done` or the turn limit. An MCP environment's tools come from `list_tools`, each
call a `call_tool` step. A typed environment's action is, by `action_mode`, the model's plain reply
(`text`: the action's one required field, a string; each reply one step, each observation the next
user message) or one tool, `step`, whose parameters are the action's JSON schema (`tool`); text
where the action fits, else tool. An action that does not validate goes back to the model as the
error. The reward is the episode's step rewards, summed. See docs/environments.md.
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
from typing import Any, Literal

import httpx
from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.loop import AgentResult, TextAction, ToolHandler, tool_error
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
# the default prompt in text mode, where no tool is offered: what a reply is sent as
TEXT_PROMPT = "You act in an environment: your whole reply is sent to it as its `{field}`{said}. Read each answer."
ActionMode = Literal["tool", "text"]


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
    action_mode: ActionMode | None = Field(
        default=None,
        description="A typed action as 'text' (the model's plain reply fills its one required string field) or "
        "'tool' (the tool `step`); null: text where the action fits, else tool.",
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


def action_fields(schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A typed action's fields less `metadata` (OpenEnv's own, not the model's to set), and the required ones."""
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    return props, [r for r in schema.get("required") or [] if r in props]


def _said(prop: dict[str, Any]) -> str:
    """A field's type in words: `string`, `integer or null`."""
    types = [prop.get("type")] if "type" in prop else [s.get("type", "object") for s in prop.get("anyOf", [])]
    return " or ".join(str(t) for t in types) or "any"


def text_field(schema: dict[str, Any] | None, asked: ActionMode | None) -> str | None:
    """The action field a plain reply fills (text mode), or None: the tool `step`, or an MCP
    environment's own tools (`schema` None). Text where it was asked or left open and the action fits
    (exactly one required field, a string: the others keep their defaults); an asked `text` that does
    not fit is refused, with the action's fields and the fix."""
    if asked == "tool":
        return None
    props, required = action_fields(schema or {})
    if len(required) == 1 and props[required[0]].get("type") == "string":
        return required[0]
    if asked is None:
        return None
    fix = "set action_mode to 'tool' (or null: the environment's choice) with rl_edit_config"
    if schema is None:
        raise ValueError(f"action_mode 'text' needs a typed action: this environment acts through its MCP tools; {fix}")
    fields = ", ".join(f"{k} ({_said(v)}{', required' if k in required else ''})" for k, v in props.items())
    raise ValueError(
        f"action_mode 'text' needs an action whose one required field is a string (a plain reply fills it); "
        f"{schema.get('title') or 'the action'} has {fields or 'no fields'}: {fix}"
    )


def text_prompt(schema: dict[str, Any], field: str) -> str:
    """The system prompt in text mode, where no tool is offered: what a reply is sent as."""
    said = schema["properties"][field].get("description")
    return TEXT_PROMPT.format(field=field, said=f" ({said})" if said else "")


def action_tool(schema: dict[str, Any]) -> ToolInfo:
    """A typed environment's action as one tool: the action's JSON schema less its `metadata`."""
    params = dict(schema)
    params["properties"], params["required"] = action_fields(schema)
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
            self.offered, action = await self._discover_tools(base, items[0])
            self.text_field: str | None = text_field(action, cfg.action_mode)
            if action is not None and self.text_field is not None and cfg.system_prompt == SYSTEM_PROMPT:
                cfg.system_prompt = text_prompt(action, self.text_field)  # no tool to speak of
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

    async def _discover_tools(self, base: str, item: EpisodeItem) -> tuple[list[ToolInfo], dict[str, Any] | None]:
        """An MCP environment's tools (`list_tools` answers), else the typed action as one tool and its
        JSON schema (`/schema`)."""
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
            ], None
        self.mcp = False
        async with httpx.AsyncClient(timeout=self.cfg.step_timeout_s, trust_env=False, verify=shared_tls()) as client:
            answer = await client.get(f"{base}/schema")
        schema = answer.json().get("action") if answer.status_code == 200 else None
        if not isinstance(schema, dict):
            raise OpenEnvError(
                f"the OpenEnv server at {base} answers neither list_tools nor /schema (HTTP {answer.status_code}): "
                "it offers the model nothing to act with"
            )
        return [action_tool(schema)], schema

    def format_prompt(self, item: EpisodeItem) -> str:
        state = _CURRENT.get()
        seen = observation_text(state.first.observation) if state is not None else ""
        return "\n\n".join(part for part in (item.prompt, seen) if part)

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        offered = [] if self.text_field is not None else self.offered  # text mode: the reply is the action
        return [t.schema() for t in offered], {t.name for t in offered}

    def loop_settings(
        self, task_id: str, tool_handler: ToolHandler, *, split: str = "train", temperature: float | None = None
    ) -> dict[str, Any]:
        """Text mode: each reply, whole, is a call of `step` with the reply as the action's field."""
        settings = super().loop_settings(task_id, tool_handler, split=split, temperature=temperature)
        if self.text_field is not None:
            settings["text_action"] = TextAction(ACTION_TOOL, self.text_field)
        return settings

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
