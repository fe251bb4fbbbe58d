"""Every finding's next step is a call this environment accepts: each diagnosis rule is made to fire
on the config of each environment family, read through a real MCP client as a run started now would
have it, and where its next step is an rl_edit_config the edit is made through that client. A pair
that cannot occur (a rule about a supervised stage where the environment has none, ...) is listed in
SKIPPED with why, and that why is checked against the family's fields."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hermes_port import ORIGINAL, port
from mcp import Client
from test_diagnosis import facts, rows
from test_diagnosis_sft import SECTION, losses, stage_evals
from test_runs_mcp import call, environ, serving

from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.rules import RULES
from rl_mcp.runs.env_health import Discards, Requests
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.reply_length import token_fields
from tinker_atropos.openenv import EPISODE_DONE

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

TESTS = Path(__file__).resolve().parent
FAULTY_SERVER = TESTS / "fixtures" / "mcp_servers" / "faulty_server.py"

# one environment of each family, as rl_select_environment names it
ARITHMETIC, GYM, CALCULATOR = "arithmetic", "reasoning_gym:leg_counting", "tool_calculator"
TOOL_SERVER, OPENENV, VERIFIERS = "mcp:echo", "openenv:mine", "adder_tools"
ATROPOS, HERMES = "equal_scores", "hermes_notes"
FAMILIES = (ARITHMETIC, GYM, CALCULATOR, TOOL_SERVER, OPENENV, VERIFIERS, ATROPOS, HERMES)

Build = Callable[[dict[str, Any], dict[str, Any]], RunFacts]  # a family's env and tinker sections -> facts


def run(
    metrics: list[dict[str, Any]],
    evals: list[dict[str, Any]] | None = None,
    *,
    env: dict[str, Any] | None = None,
    tinker: dict[str, Any] | None = None,
    **kw: Any,
) -> Build:
    """A run with these rows and facts on a family's sections (`env`, `tinker`: values over the family's)."""
    return lambda e, t: facts(metrics, evals, env={**e, **(env or {})}, tinker={**t, **(tinker or {})}, **kw)


def discarding(*, too_long: bool, env: dict[str, Any] | None = None) -> Build:
    """Groups discarded in a row: sequences past the trainer's limit, or replies that all scored 0."""

    def build(section: dict[str, Any], tinker: dict[str, Any]) -> RunFacts:
        limit = tinker["max_token_trainer_length"]
        d = Discards(5, 5, 0, None, 0.0, ["no"] * 4, [0.0] * 4, (limit + 100, limit) if too_long else None)
        return run([], env=env, active=True, discards=d)(section, tinker)

    return build


def timing_out(seconds_per_token: float | None) -> Build:
    """Requests for the most tokens a reply of the environment may take, timing out at 1 s a token
    (measured) or at a speed not measured yet."""

    def build(env: dict[str, Any], tinker: dict[str, Any]) -> RunFacts:
        asked = max(token_fields(env).values())
        r = Requests(8, 4, 4, client_timeout_s=120.0, seconds_per_token=seconds_per_token, max_asked=asked)
        return run([], active=True, requests=r)(env, tinker)

    return build


STAGE = {"sft": SECTION}  # a run that had a supervised stage
SILENT = rows(2, agent_tool_calls_mean=0.0, no_signal_share=1.0, reward_std=0.0, reward_mean=0.0)
RISING = rows(12, reward_mean=lambda s: 0.1 if s < 5 else 0.6)
SOLVED = ItemCounts(
    "product",
    16,
    8,
    8,
    0,
    False,
    10,
    tied_at_top=8,
    tied_at_zero=0,
    tied_other=0,
    reply_tokens=1000,
    tied_reply_tokens=800,
)
STALLED = rows(6, step_seconds=10.0)
SLOWER = rows(12, step_seconds=lambda s: 2.0 if s < 7 else 20.0, wait_seconds=lambda s: 1.0 if s < 7 else 18.0)

# Each rule: the runs that make it fire, one for each next step it chooses by more than the family's fields.
SCENARIOS: dict[str, tuple[Build, ...]] = {
    "sft_taught_no_tool_calls": (run(SILENT, stage_evals((0.0, 0.0), (0.0, 0.0)), sft_steps=losses(4, 3), env=STAGE),),
    "sft_memorized": (run([], stage_evals((0.125, 0.0), (0.125, 0.875)), sft_steps=losses(4, 1), env=STAGE),),
    "sft_left_no_signal": (
        run(rows(2, groups=2), stage_evals((0.0625, 0.0), (1.0, 1.0)), groups_scored=209, env=STAGE),
    ),
    "items_solved": (run(rows(2), items=SOLVED),),
    "no_tool_calls": (run(SILENT),),
    "episodes_never_done": (run(rows(4, agent_tool_calls_mean=1.5, env_metrics={EPISODE_DONE: 0.0})),),
    "hermes_episodes_failed": (run(rows(2, env_metrics={"hermes_failed_share": 0.5})),),  # its step reads a log
    "no_reward_signal": (run(rows(4, no_signal_share=1.0, reward_std=0.0)),),
    "groups_narrowing": (
        run(rows(12, distinct_reply_share=lambda s: 1.0 if s < 5 else 0.25, reward_mean=0.6)),  # collapsed
        run(rows(4, no_signal_share=lambda s: 0.0 if s == 1 else 0.75)),  # all-equal groups
    ),
    "reward_up_eval_flat": (run(RISING, [{"step": 0, "eval_accuracy": 0.25}, {"step": 12, "eval_accuracy": 0.25}]),),
    "eval_regressed": (run(RISING, [{"step": 0, "eval_accuracy": 0.5}, {"step": 12, "eval_accuracy": 0.2}]),),
    "loss_unstable": (run(rows(4, loss=lambda s: math.nan if s == 3 else 0.1, grad_norm=1.0)),),
    "off_policy_drift": (
        run(rows(6, logprob_drift=0.5)),  # importance_sampling: ppo
        run(rows(6, logprob_drift=0.5), tinker={"loss_fn": "ppo"}),  # ppo: a lower learning rate
    ),
    "sampler_mismatch_grows": (
        run(rows(12, sampler_mismatch=lambda s: 0.005 if s <= 4 else 0.08)),  # cispo
        run(rows(12, sampler_mismatch=lambda s: 0.005 if s <= 4 else 0.08), tinker={"loss_fn": "cispo"}),  # lr
    ),
    "teacher_no_better": (
        run(rows(2), [{"step": 0, "eval_accuracy": 0.5}], teacher={"run_id": "t", "held_out_accuracy": 0.4}),
    ),
    "teacher_kl_flat": (
        run(rows(12, teacher_kl=0.8), tinker={"teacher": "t", "distill_coef": 1.0}),  # a higher learning rate
        run(rows(12, teacher_kl=0.8), tinker={"teacher": "t", "distill_coef": 0.5}),  # distill_coef 1
    ),
    "stalled": (run(STALLED, active=True, now=STALLED[-1]["time"] + 600, env_drops_equal_groups=True),),
    "groups_discarded": (
        discarding(too_long=True),
        discarding(too_long=True, env={"max_token_length": 2048}),  # raised past the trainer's limit
        discarding(too_long=False),
    ),
    "throughput_drop": (run(SLOWER),),
    "requests_time_out": (timing_out(1.0), timing_out(None)),
}

NOT_AGENTS = (ARITHMETIC, GYM, ATROPOS)
NO_SFT = (*NOT_AGENTS, VERIFIERS)
SFT_RULES = ("sft_taught_no_tool_calls", "sft_memorized", "sft_left_no_signal")
# (rule, family) -> why the rule cannot fire there; each why is checked against the family's fields (HOLDS)
NO_STAGE = "no `sft` field: its runs have no supervised stage"
NO_TOOLS = "not an agent: its rollouts report no tool calls (agent_tool_calls_mean)"
NOT_OPENENV = "only an OpenEnv environment reports whether it ended an episode (openenv_episode_done)"
SKIPPED: dict[tuple[str, str], str] = {
    **{(rule, family): NO_STAGE for rule in SFT_RULES for family in NO_SFT},
    **{("no_tool_calls", family): NO_TOOLS for family in NOT_AGENTS},
    **{("episodes_never_done", family): NOT_OPENENV for family in FAMILIES if family != OPENENV},
}
HOLDS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    NO_STAGE: lambda family, env: "sft" not in env,
    # a Hermes-style agent has max_agent_turns; a verifiers ToolEnv reports its calls without it
    NO_TOOLS: lambda family, env: "max_agent_turns" not in env and family != VERIFIERS,
    NOT_OPENENV: lambda family, env: not family.startswith("openenv:"),
}


def serving_env(root: Path) -> dict[str, str]:
    """A server that lists every family: a user's tool server (never started here), OpenEnv server
    (by URL: the bundled OpenEnvEnv's fields, as for a folder, with nothing to install), Atropos,
    verifiers and ported Hermes environments."""
    servers = root / "tool-servers.json"
    servers.write_text(json.dumps({"mcpServers": {"echo": {"command": sys.executable, "args": [str(FAULTY_SERVER)]}}}))
    openenv = root / "openenv-servers.json"
    openenv.write_text(json.dumps({"servers": {"mine": {"url": "http://127.0.0.1:9"}}}))
    hermes = root / "hermes"
    hermes.mkdir()
    (hermes / ORIGINAL.name).write_text(port(ORIGINAL.read_text()))
    dirs = (TESTS / "byo_envs" / "stalls", TESTS / "byo_envs" / "verifiers", hermes)
    return {
        "RL_MCP_TOOL_SERVERS": str(servers),
        "RL_MCP_OPENENV_SERVERS": str(openenv),
        "RL_MCP_ENV_DIRS": os.pathsep.join(map(str, dirs)),
    }


def run_sections(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The env and tinker sections a run started now would have (render_run_config): the env fields
    but those the server sets per run, the training fields and the profile's model."""
    fields = config["fields"]
    env = {f["name"]: f["value"] for f in fields if f["section"] == "env" and f["status"] != "managed"}
    tinker = {f["name"]: f["value"] for f in fields if f["section"] == "trainer"}
    return env, {**tinker, "base_model": config["profile"]["model"]}


async def test_every_findings_edit_is_accepted_by_every_family(rl_home: Path) -> None:
    assert set(SCENARIOS) == {rule.__name__ for rule in RULES}
    assert {rule for rule, _ in SKIPPED} <= set(SCENARIOS) and {f for _, f in SKIPPED} <= set(FAMILIES)
    refused: list[str] = []
    async with serving(environ(rl_home, **serving_env(rl_home.parent))) as (_, server), Client(server) as client:
        for family in FAMILIES:
            await call(client, "rl_select_environment", name=family)
            env, tinker = run_sections(await call(client, "rl_get_current_config"))
            for rule in RULES:
                if (why := SKIPPED.get((rule.__name__, family))) is not None:
                    assert HOLDS[why](family, env), (rule.__name__, family, why)
                    continue
                for build in SCENARIOS[rule.__name__]:
                    finding = rule(build(env, tinker))
                    assert finding is not None, f"{rule.__name__} did not fire on {family}"
                    step = finding.next_step
                    if step.tool != "rl_edit_config":
                        continue
                    answer = await client.call_tool(step.tool, step.arguments)
                    if answer.is_error:
                        why = answer.content[0].text  # type: ignore[union-attr]
                        refused.append(f"{finding.code} on {family}: {step.call}: {why}")
    assert refused == [], "\n".join(refused)
