"""hermes-tasks: a Hermes task set trained inside hermes-agent itself; listed as `hermes-tasks:<folder>`.

Each rollout is one episode of the real Hermes (`hermes -t TOOLSETS -z PROMPT`, the `hermes` runtime)
in a fresh sandbox holding the item's files, against the run's inference server under the episode's
own key; then the item's check runs in that sandbox (or the folder's `score.py`). The trainer learns
from what the server recorded for that key: the prompt and sampled token ids of each call, never the
text re-tokenized (`hermes_harness/sequences.py`). Hermes' fixed prompt is measured against the model's
context before the first episode (`hermes_harness/prompt_fit.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
from atroposlib.envs.base import APIServerConfig, ScoredDataGroup
from pydantic import Field

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.agent.loop import AgentResult
from tinker_atropos.agent.sandboxes.local import LocalSandbox
from tinker_atropos.agent.tool_calls import parse_tool_calls
from tinker_atropos.agent.tools import ToolContext
from tinker_atropos.environments.common import local_server_defaults
from tinker_atropos.hermes_harness.checks import CHECK_TIMEOUT_S, load_scorer, score_episode
from tinker_atropos.hermes_harness.episode import Episode, HermesRun, episode_key, run_episode
from tinker_atropos.hermes_harness.hermes_config import episode_config
from tinker_atropos.hermes_harness.prompt_fit import PromptFit, capture_first_request
from tinker_atropos.hermes_harness.sequences import EpisodeEvicted, EpisodeSequences, episode_sequences, take_episode
from tinker_atropos.hermes_harness.task_set import HermesTask, read_task_set
from tinker_atropos.models.paths import SMOLLM2
from tinker_atropos.venvs import hermes_bin

logger = logging.getLogger(__name__)


class HermesTasksConfig(HermesAgentEnvConfig):
    tasks_folder: str | None = Field(
        default=None,
        description="The task set's folder (holds hermes-tasks.yaml; set when hermes-tasks:<name> is selected).",
    )
    hermes_bin: str | None = Field(
        default=None, description="The `hermes` that runs the episodes (set by the server: its hermes runtime)."
    )


class HermesTasksEnv(HermesAgentBaseEnv):
    name = "hermes_tasks"
    env_config_cls = HermesTasksConfig

    @classmethod
    def config_init(cls) -> tuple[HermesTasksConfig, list[APIServerConfig]]:
        servers = local_server_defaults(model=SMOLLM2)
        config = HermesTasksConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=2,
            batch_size=4,
            max_token_length=8192,  # SmolLM2's context: Hermes' own prompt is most of it
            max_turn_tokens=128,
            agent_temperature=1.0,
            steps_per_eval=10,
            use_wandb=False,
            eval_before_training=True,
        )
        return config, servers

    @property
    def cfg(self) -> HermesTasksConfig:
        return self.config  # type: ignore[return-value]

    async def setup(self) -> None:
        if not self.cfg.tasks_folder:
            raise ValueError("tasks_folder is not set: select a hermes-tasks:<name> environment")
        folder = Path(self.cfg.tasks_folder)
        self.task_set = read_task_set(folder)
        self.scorer = load_scorer(folder)
        self.train_items = self.task_set.train()
        self.eval_items = self.task_set.held_out()
        hermes = Path(self.cfg.hermes_bin or hermes_bin(os.environ))
        if not hermes.exists():
            raise FileNotFoundError(f"{hermes} is missing: `mcp-server-rl setup hermes` makes the hermes runtime")
        self.hermes = HermesRun(hermes, tuple(self.task_set.toolsets), self.task_set.episode_timeout_s)
        # a group is its episodes at once: atroposlib's worker timeout must outlast the longest
        needed = int(self.task_set.episode_timeout_s + CHECK_TIMEOUT_S + 60)
        if self.config.worker_timeout < needed:
            logger.info(
                "worker_timeout %s -> %d s: a group's episodes may take their time limit",
                self.config.worker_timeout,
                needed,
            )
            self.config.worker_timeout = needed
        self.http = httpx.AsyncClient(timeout=60)
        self.counts = {"episodes": 0, "timed_out": 0, "failed": 0, "unmatched": 0, "merged": 0}
        fit, asked = await self.measure_prompt(self.train_items[0])
        # what Hermes sends, word for word: a supervised stage's examples are rendered in it (its system
        # prompt, its tools in its order), so what the stage teaches is what Hermes then asks
        self.hermes_tools = list(asked.get("tools") or [])
        system = next((m for m in asked["messages"] if m.get("role") == "system"), None)
        self.config.system_prompt = str(system["content"]) if system else None
        logger.info(
            "Hermes' fixed prompt: %d tokens of %d, %d left for a turn", fit.prompt_tokens, fit.context, fit.left
        )
        fit.check(self.hermes.toolsets)

    # --- where Hermes reaches the model ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        return str(self.server.servers[0].config.base_url).rstrip("/")

    @property
    def model_name(self) -> str:
        return str(self.server.servers[0].config.model_name)

    def episode_settings(self, key: str, url: str, temperature: float) -> dict[str, Any]:
        return episode_config(
            self.model_name,
            url,
            key,
            max_turns=self.task_set.max_turns,
            temperature=temperature,
            max_tokens=self.cfg.max_turn_tokens,
        )

    async def measure_prompt(self, item: HermesTask) -> tuple[PromptFit, dict[str, Any]]:
        """Hermes' first request for `item` (its body), caught and rendered as the server renders it."""

        async def hermes_at(url: str) -> str:
            async with task_sandboxes.task_sandbox(uuid.uuid4().hex) as sandbox:
                config = self.episode_settings(episode_key(), url, 0.0)
                episode = await run_episode(self._local(sandbox), self.hermes, item.prompt, config, "measure")
            return episode.stderr_tail

        body = await capture_first_request(hermes_at)
        prompt = ChatScaffold(self.tokenizer, body.get("tools")).prompt_tokens(body["messages"])
        return PromptFit(len(prompt), self.cfg.max_token_length, self.cfg.max_turn_tokens or 1), body

    def _resolve_tools_for_group(self) -> tuple[list[dict[str, Any]], set[str]]:
        """Hermes' own tool schemas, as its first request sent them."""
        return self.hermes_tools, {t["function"]["name"] for t in self.hermes_tools}

    @staticmethod
    def _local(sandbox: Any) -> LocalSandbox:
        if not isinstance(sandbox, LocalSandbox):
            raise ValueError("hermes-tasks runs Hermes in a bwrap or local sandbox: set terminal_backend to auto")
        return sandbox

    # --- one episode ----------------------------------------------------------------------------

    def format_prompt(self, item: HermesTask) -> str:
        return item.prompt

    async def rollout(
        self, item: HermesTask, *, split: str = "train", temperature: float | None = None, demonstration: Any = None
    ) -> tuple[AgentResult, float]:
        """One Hermes episode in a fresh sandbox, scored there; its sequences from the server's records."""
        temp = self.cfg.agent_temperature if temperature is None else temperature
        key = episode_key()
        async with task_sandboxes.task_sandbox(uuid.uuid4().hex) as sandbox:
            local = self._local(sandbox)
            for path, content in item.files.items():
                await local.write_bytes(path, content.encode())
            episode = await run_episode(
                local, self.hermes, item.prompt, self.episode_settings(key, self.base_url, temp), key
            )
            reward = await score_episode(item, episode, local, self.scorer)
        try:
            calls = await take_episode(self.http, self.base_url, key)
            built = episode_sequences(calls)
            unmatched = f"{built.refused}: {built.detail}" if built.refused else None
        except EpisodeEvicted as exc:
            calls, built, unmatched = [], EpisodeSequences(), f"{exc.reason}: {exc}"
        self._count(episode, unmatched, built.merged, split)
        replies = [self.tokenizer.decode(c.choices[0].completion_ids, skip_special_tokens=False) for c in calls]
        tool_calls = sum(len(parse_tool_calls(r).calls) for r in replies)
        traces = [] if unmatched else built.sequences
        result = AgentResult(
            messages=[{"role": "user", "content": item.prompt}, {"role": "assistant", "content": episode.answer}],
            turns_used=len(calls),
            finished_naturally=not episode.failed,
            tool_calls=tool_calls,
            trace=traces[0] if len(traces) == 1 else None,
            stop_reason="timeout" if episode.timed_out else ("error" if episode.failed else "answered"),
        )
        result.managed_state = {
            "traces": traces, "merged": built.merged, "unmatched": unmatched, "swapped": built.swapped
        }  # fmt: skip
        return result, reward

    def _count(self, episode: Episode, unmatched: str | None, merged: bool, split: str) -> None:
        self.counts["episodes"] += 1
        self.counts["timed_out"] += episode.timed_out
        self.counts["merged"] += merged
        if unmatched:
            self.counts["unmatched"] += 1
            logger.warning("episode %s left out of training: %s", episode.key, unmatched)
        if episode.failed and not episode.timed_out:
            self.counts["failed"] += 1
            logger.error(
                "Hermes failed (exit %s, %s split) after %.1f s: %s; its stderr ends:\n%s",
                episode.exit_code, split, episode.seconds, episode.answer[-500:], episode.stderr_tail,
            )  # fmt: skip
        elif episode.timed_out:
            logger.warning("episode %s cut at its time limit (%g s): scored 0", episode.key, self.hermes.timeout_s)

    async def compute_reward(self, item: HermesTask, result: AgentResult, ctx: ToolContext) -> float:
        raise NotImplementedError("rollout() scores each episode in its own sandbox")

    async def collect_trajectories(self, item: HermesTask) -> tuple[ScoredDataGroup | None, list[Any]]:
        """The group's episodes at once, one sequence each with its score. run-api takes a group as
        group_size sequences: an episode whose calls did not all merge gives its last sequence (its own
        prompt and replies, exact; the earlier ones counted as left out), and a group with an episode
        whose records cannot be matched is not sent (the episodes left out so far ride in the metrics)."""
        done = await asyncio.gather(*(self.rollout(item) for _ in self.group_replies))
        kept = [(res, reward) for res, reward in done if res.managed_state and res.managed_state["traces"]]
        if len(kept) < len(done):
            logger.warning(
                "a group of %r left out: %d of its episodes cannot be matched", item.id, len(done) - len(kept)
            )
            return None, []
        n = len(done)
        share = {
            "hermes_timed_out_share": sum(r.stop_reason == "timeout" for r, _ in done) / n,
            "hermes_failed_share": sum(r.stop_reason == "error" for r, _ in done) / n,
            "hermes_episodes_left_out": float(self.counts["unmatched"]),
        }
        tokens, masks, scores, logprobs, overrides = [], [], [], [], []
        for res, reward in kept:
            state = res.managed_state or {}
            trace = state["traces"][-1]
            tokens.append(trace.tokens)
            masks.append(trace.masks)
            logprobs.append(trace.logprobs or [])
            scores.append(reward)
            merged = {"hermes_merged": float(state["merged"]), "hermes_swapped": float(state["swapped"])}
            merged["hermes_sequences_left_out"] = float(len(state["traces"]) - 1)
            overrides.append(
                {
                    "correct": reward >= 1.0,
                    "turns": res.turns_used,
                    "tool_calls": res.tool_calls,
                    "tool_errors": 0,
                    "env_metrics": {**share, **merged},
                }
            )
        group = ScoredDataGroup(tokens=tokens, masks=masks, scores=scores, overrides=overrides)
        group["inference_logprobs"] = logprobs
        return group, []

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.evaluate_agent(self.eval_items)

    async def close(self) -> None:
        if http := getattr(self, "http", None):
            await http.aclose()
        logger.info("Hermes episodes: %s", self.counts if hasattr(self, "counts") else {})


if __name__ == "__main__":
    HermesTasksEnv.cli()
