"""Drives rl-mcp through Hermes' own MCP tool layer, as Hermes' agent loop would (no LLM).

Run by tests/test_hermes.py with the python of the `hermes` runtime, `.runtimes/hermes` (hermes-agent 0.19.0, whose
MCP client is mcp 1.x: the 2025 protocol generation), with HERMES_HOME set to a folder whose
config.yaml holds two servers made from examples/hermes/config.yaml:
  rl       the local profile, key lines left as Hermes passes them unset (`${TINKER_API_KEY}`)
  rl_paid  the tinker profile with a well-formed key that reaches nothing
Prints one JSON line with what it saw; any failed expectation exits non-zero with the reason.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from model_tools import handle_function_call  # type: ignore[import-not-found]
from tools import approval  # type: ignore[import-not-found]
from tools.mcp_tool import discover_mcp_tools  # type: ignore[import-not-found]

STEPS = 2
seen: dict[str, Any] = {}


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = handle_function_call(name, args or {})
    answer = json.loads(raw)
    assert isinstance(answer, dict), raw
    return answer


def ok(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = call(name, args)
    assert "error" not in answer, f"{name}: {answer['error']}"
    structured = answer.get("structuredContent", answer.get("result"))
    assert isinstance(structured, dict), answer
    structured["_text"] = answer.get("result") if isinstance(answer.get("result"), str) else ""
    return structured


def main() -> None:
    tools = discover_mcp_tools()
    ours = sorted(t for t in tools if t.startswith("mcp__rl__rl_"))
    seen["tools"] = ours
    assert len(ours) == 17, ours

    # --- the keyless default (SmolLM2): ${TINKER_API_KEY} left literal must not switch to Tinker
    config = ok("mcp__rl__rl_select_environment", {"name": "letter_repeat"})["config"]
    seen["profile"] = config["profile"]["name"]
    assert seen["profile"] == "smollm2", config["profile"]  # the keyless default
    for field, value in {"total_steps": STEPS, "group_size": 4, "batch_size": 8, "eval_size": 4}.items():
        ok("mcp__rl__rl_edit_config", {"field": field, "value": value})

    started = ok("mcp__rl__rl_start_training", {})
    run_id = started["run_id"]
    seen["start"] = {k: started.get(k) for k in ("status", "wandb_project", "wandb_run_name", "cost_estimate")}
    assert started["wandb_project"] and started["wandb_run_name"], started
    assert f"rl://runs/{run_id}/logs/trainer" in started["_text"], "resource links reach Hermes' text"

    deadline = time.monotonic() + 240
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = ok("mcp__rl__rl_check_status", {"run_id": run_id})
        if status["status"] not in ("starting", "running", "stopping"):  # stopping: its processes are ending
            break
        time.sleep(1.0)
    seen["status"] = {k: status.get(k) for k in ("status", "step", "environment", "wandb_project", "wandb_run_name")}
    assert status["status"] == "completed", (status.get("error"), status.get("failure_log_tail"))
    assert status["environment"] == "letter_repeat" and status["step"] == STEPS, seen["status"]

    results = ok("mcp__rl__rl_get_results", {"run_id": run_id})
    seen["results"] = {k: results.get(k) for k in ("status", "steps_completed", "wandb_project", "wandb_run_name")}
    assert results["steps_completed"] == STEPS and results["final_weights_exists"], results
    assert results["wandb_run_name"] == started["wandb_run_name"]

    log = call("mcp__rl__read_resource", {"uri": f"rl://runs/{run_id}/logs/trainer"})
    text = json.dumps(log)
    assert "error" not in log and "step" in text, log
    seen["trainer_log_chars"] = len(text)

    prompt = call("mcp__rl__get_prompt", {"name": "rl_workflow", "arguments": {"environment": "letter_repeat"}})
    assert "rl_check_status" in json.dumps(prompt), prompt
    seen["prompt"] = "ok"

    # --- the tinker profile: no OpenRouter key, no silent local test -------------------------
    ok("mcp__rl_paid__rl_select_environment", {"name": "letter_repeat"})
    refused = call("mcp__rl_paid__rl_test_inference", {"num_steps": 1, "group_size": 2})
    seen["paid_inference"] = refused.get("error", "")
    for way in ("OPENROUTER_API_KEY", "base_url", "target='local'"):
        assert way in seen["paid_inference"], refused

    # --- a paid start asks the user first (Hermes' approval prompt); declined: nothing starts --
    asked: list[str] = []

    def decline(message: str, description: str, **_: Any) -> str:
        asked.append(message)
        return "decline"

    approval.request_elicitation_consent = decline
    declined = call("mcp__rl_paid__rl_start_training", {})
    seen["paid_start"] = {"asked": asked, "error": declined.get("error")}
    assert asked and "tokens" in asked[0] and "2500 steps" in asked[0], asked
    assert "declined" in str(declined.get("error")), declined
    runs = ok("mcp__rl_paid__rl_list_runs", {})
    assert runs["runs"] == [], runs


if __name__ == "__main__":
    try:
        main()
    except AssertionError as exc:
        print(json.dumps({"failed": str(exc), "seen": seen}, default=str))
        sys.exit(1)
    print(json.dumps({"ok": True, "seen": seen}, default=str))
    sys.exit(0)
