"""The README.md model card every export writes: what the model is, how it was trained, how well it
does on held-out items before and after, and the reward curve (reward_curve.png beside it)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from rl_mcp.export.plan import ExportPlan
from rl_mcp.plots import reward_loss_png
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from tinker_atropos.best_checkpoint import BEST
from tinker_atropos.export.model_facts import base_facts
from tinker_atropos.run_files import RunFiles, read_jsonl

CURVE = "reward_curve.png"


def write_card(plan: ExportPlan, load_command: str, verification: dict[str, Any]) -> Path:
    files = RunFiles(plan.run_dir)
    metrics, evals, validation = read_jsonl(files.metrics), read_jsonl(files.evals), read_jsonl(files.validation)
    title = f"{plan.run_id} ({plan.environment})"
    (plan.out / CURVE).write_bytes(reward_loss_png(metrics, evals=evals, validation=validation, title=title))
    facts = base_facts(plan.base_model)
    lines = [
        "---",
        f"license: {facts.license}",
        f"base_model: {facts.hub_id}",
        "tags: [rl-mcp, grpo, lora, reinforcement-learning, atropos]",
        "---",
        "",
        f"# {plan.name}",
        "",
        f"{facts.hub_id} trained with GRPO (LoRA) by rl-mcp on the Atropos environment "
        f"`{plan.environment}`; run `{plan.run_id}`, checkpoint `{plan.checkpoint.name}` ({plan.chosen_because}).",
        "",
        "| | |",
        "|---|---|",
        f"| base model | {facts.hub_id}{f' ({facts.note})' if facts.note else ''} |",
        f"| license (the base model's) | {facts.license} |",
        f"| environment | `{plan.environment}` |",
        f"| training steps | {len(metrics)} (checkpoint: {plan.checkpoint.name}) |",
        f"| backend | {plan.backend} |",
        f"| format | {plan.format}{f' ({plan.dtype})' if plan.dtype else ''} |",
        f"| exported | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |",
        "",
        "## Held-out evaluation",
        "",
        *_eval_lines(evals),
        "",
        "## Training",
        "",
        f"![reward, loss and held-out eval per step]({CURVE})",
        "",
        *_reward_lines(metrics),
        "",
        "Config that differs from the profile (the edits the run started with):",
        "",
        *_edit_lines(files),
        "",
        "Training settings:",
        "",
        "```yaml",
        yaml.safe_dump(_training_settings(plan), sort_keys=True).strip(),
        "```",
        "",
        "## Use",
        "",
        "```",
        load_command,
        "```",
        "",
        f"Checked before release: greedy replies to {verification.get('prompts')} of the environment's prompts "
        f"equal the trained policy's on {verification.get('matches')} (required: {verification.get('required')}).",
        "",
    ]
    path = plan.out / "README.md"
    path.write_text("\n".join(lines))
    return path


def _eval_lines(evals: list[dict[str, Any]]) -> list[str]:
    scored = [e for e in evals if isinstance(e.get("eval_accuracy"), int | float) and e.get("checkpoint") != BEST]
    if not scored:
        return ["No held-out evaluation was run."]
    first, last = scored[0], scored[-1]
    best = max(scored, key=lambda e: e["eval_accuracy"])
    items = last.get("num_items") or first.get("num_items")
    line = (
        f"Accuracy on {items or 'the'} held-out items: {first['eval_accuracy']:.3f} at step {first.get('step', 0)} "
        f"(before training) -> {last['eval_accuracy']:.3f} at step {last.get('step')}; best "
        f"{best['eval_accuracy']:.3f} at step {best.get('step')}."
    )
    chosen = next((e for e in evals if e.get("checkpoint") == BEST), None)
    if chosen is not None:  # chosen on the validation set, scored on the held-out one once
        line += f" The best checkpoint by validation (step {chosen.get('step')}): {chosen['eval_accuracy']:.3f}."
    return [line]


def _reward_lines(metrics: list[dict[str, Any]]) -> list[str]:
    rewards = [m["reward_mean"] for m in metrics if isinstance(m.get("reward_mean"), int | float)]
    if not rewards:
        return ["No step recorded a reward."]
    return [f"Mean reward: {rewards[0]:.3f} at the first step, {rewards[-1]:.3f} at the last ({len(rewards)} steps)."]


def _edit_lines(files: RunFiles) -> list[str]:
    try:
        edits = json.loads(files.edits.read_text())
    except (OSError, ValueError):
        return ["(not recorded for this run)"]
    return [f"- `{k}`: `{json.dumps(v)}`" for k, v in sorted(edits.items())] or ["(none: the profile's config)"]


def _training_settings(plan: ExportPlan) -> dict[str, Any]:
    try:
        trainer = read_run_config(RunFiles(plan.run_dir).config).get("trainer") or {}
    except RUN_CONFIG_ERRORS:
        return {}
    keep = ("base_model", "lora_rank", "learning_rate", "loss_fn", "group_size", "total_steps", "max_tokens")
    return {k: trainer[k] for k in keep if k in trainer}
