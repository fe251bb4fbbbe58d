"""`mcp-server-rl demo`: the whole agent workflow, driven through a real MCP client over stdio.

It starts `mcp-server-rl serve` as a subprocess exactly as Claude Desktop or Hermes would, then does what
an agent does: list environments, select the learnable one, read and edit its config, test it
against real inference, train, watch, and collect the results. Everything runs on the local
profile (no keys, no network); the state dir is separate from the user's `~/.rl-mcp`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from rl_mcp import interrupts
from rl_mcp.distribution import COMMAND

ENVIRONMENT = "arithmetic"
PROFILE = "smollm2"
STEPS = 10
# The demo's edits on top of the profile's defaults: the held-out eval before the first step and
# after the last only (32 sums each), so the 5-minute budget goes to training.
DEMO_EDITS: dict[str, Any] = {"eval_size": 32, "steps_per_eval": 1000}
FINAL_STATUSES = frozenset({"completed", "failed", "stopped", "lost"})
LOG_TAIL_LINES = 20


class DemoError(Exception):
    """A workflow step failed; the message says which step and why."""


@dataclass
class DemoOptions:
    home: Path
    steps: int
    plot: Path
    timeout: float
    environment: str = ENVIRONMENT
    profile: str = PROFILE
    edits: dict[str, Any] = field(default_factory=dict)
    test_inference: bool = True
    poll_seconds: float = 1.0


def parse_args(argv: list[str] | None) -> DemoOptions:
    parser = argparse.ArgumentParser(
        prog="mcp-server-rl demo",
        description="Run the whole agent workflow on the local backend through a real MCP client.",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=Path(".demo-home"),
        help="state dir of the demo's server (RL_MCP_HOME); default ./.demo-home, kept afterwards",
    )
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    parser.add_argument("--plot", type=Path, default=None, help="where to write the reward curve PNG")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on training after this many seconds")
    parser.add_argument("--skip-inference-test", action="store_true", help="leave out rl_test_inference (saves ~20 s)")
    parser.add_argument("--environment", default=ENVIRONMENT, help=f"environment to train (default {ENVIRONMENT})")
    parser.add_argument("--profile", default=PROFILE, help=f"operator profile of the demo's server (default {PROFILE})")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="one more rl_edit_config edit, after the demo's own (VALUE read as JSON, else as text): "
        "--set batch_size=16",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    sets: dict[str, Any] = {}
    for item in args.set:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            parser.error(f"--set {item!r}: expected FIELD=VALUE, e.g. --set batch_size=16")
        try:
            sets[name] = json.loads(raw)
        except ValueError:
            sets[name] = raw
    home = args.home.expanduser().resolve()
    plot = (args.plot or home / "reward_curve.png").expanduser().resolve()
    return DemoOptions(
        home=home,
        steps=args.steps,
        plot=plot,
        timeout=args.timeout,
        test_inference=not args.skip_inference_test,
        environment=args.environment,
        profile=args.profile,
        edits={**(DEMO_EDITS if args.environment == ENVIRONMENT else {}), **sets},
    )


def server_command() -> tuple[str, list[str]]:
    """The installed `mcp-server-rl` next to this interpreter, as a client config would name it (never an
    `rl-mcp` found on PATH: PyPI's project of that name is another one)."""
    script = Path(sys.executable).with_name(COMMAND)
    if script.exists():
        return str(script), ["serve"]
    found = shutil.which(COMMAND)
    if found:
        return found, ["serve"]
    return sys.executable, ["-m", "rl_mcp", "serve"]


def server_environment(home: Path, profile: str = PROFILE) -> dict[str, str]:
    """Only what the demo's server needs: keys are deliberately not passed (a local profile)."""
    env = {
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": profile,
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
    }
    for passthrough in ("TINKER_ATROPOS_CACHE", "RL_MCP_ENV_DIRS", "RL_MCP_RUNTIMES", "TMPDIR"):
        if passthrough in os.environ:
            env[passthrough] = os.environ[passthrough]
    return env


# ----------------------------------------------------------------------------- output


@dataclass
class Console:
    """Step headers and answers on stdout; the live progress bar on stderr."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _bar_open: bool = False

    def step(self, number: int, title: str) -> None:
        self.end_bar()
        print(f"\n[{number}] {title}", file=self.out, flush=True)

    def info(self, text: str) -> None:
        self.end_bar()
        for line in text.splitlines() or [""]:
            print(f"    {line}", file=self.out, flush=True)

    def bar(self, text: str) -> None:
        if self.err.isatty():
            print(f"\r\033[K    {text}", end="", file=self.err, flush=True)
            self._bar_open = True
        else:
            print(f"    {text}", file=self.err, flush=True)

    def end_bar(self) -> None:
        if self._bar_open:
            print(file=self.err, flush=True)
            self._bar_open = False


def progress_line(status: dict[str, Any], elapsed: float) -> str:
    """`[#####-----] step 7/20  reward 0.41  loss 0.012  running  63s`."""
    step = int(status.get("step") or 0)
    total = int(status.get("total_steps") or 0)
    width = 30
    filled = int(width * step / total) if total else 0
    bar = "#" * filled + "-" * (width - filled)
    metrics = status.get("latest") or {}
    parts = [f"[{bar}] step {step}/{total or '?'}"]
    reward = metrics.get("reward_mean")
    if reward is not None:
        parts.append(f"reward {reward:.3f}")
    loss = metrics.get("loss")
    if loss is not None:
        parts.append(f"loss {loss:.4f}")
    parts.append(str(status.get("stage") or status.get("status") or "?"))
    eta = status.get("eta_seconds")
    parts.append(f"{elapsed:.0f}s" + (f" (eta {eta:.0f}s)" if eta is not None else ""))
    return "  ".join(parts)


# ----------------------------------------------------------------------------- MCP calls


def tool_error_text(result: Any) -> str:
    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    return "\n".join(texts) or "(no message)"


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Call a tool; an isError answer or a protocol error becomes a DemoError with the message."""
    try:
        result = await client.call_tool(tool, args or {})
    except MCPError as exc:
        raise DemoError(f"{tool} failed: {exc.error.message}") from exc
    if result.is_error:
        raise DemoError(f"{tool} failed: {tool_error_text(result)}")
    return dict(result.structured_content or {}), result


def log_tails(status: dict[str, Any]) -> str:
    """The failing process's log tail, else the last lines of every log rl_check_status returned."""
    if status.get("failure_log_tail"):
        return "\n".join(["--- log of the failing process (last lines) ---", *status["failure_log_tail"]])
    lines: list[str] = []
    for name, tail in (status.get("logs") or {}).items():
        if tail:
            lines.append(f"--- {name} log (last lines) ---")
            lines.extend(tail[-LOG_TAIL_LINES:])
    return "\n".join(lines)


def summarize_config(view: dict[str, Any], names: tuple[str, ...]) -> str:
    """`name = value  (status)` for the named fields of a ConfigView."""
    by_name = {f["name"]: f for f in view.get("fields", [])}
    rows = []
    for name in names:
        if name in by_name:
            f = by_name[name]
            rows.append(f"{name} = {json.dumps(f['value'])}  ({f['status']})")
    return "\n".join(rows)


# ----------------------------------------------------------------------------- the workflow


async def watch(client: Client, console: Console, run_id: str, opts: DemoOptions) -> dict[str, Any]:
    started = time.monotonic()
    shown: tuple[Any, ...] = ()
    while True:
        status, _ = await call(client, "rl_check_status", {"run_id": run_id})
        elapsed = time.monotonic() - started
        if status.get("rate_limited"):
            raise DemoError(
                "rl_check_status is rate-limited: the demo's server must run with RL_MCP_STATUS_MIN_INTERVAL=0"
            )
        now_showing = (status.get("step"), status.get("stage"), status.get("status"))
        if console.err.isatty() or now_showing != shown:  # a file or pipe gets one line per change
            console.bar(progress_line(status, elapsed))
            shown = now_showing
        if status.get("status") in FINAL_STATUSES:
            console.end_bar()
            return status
        if elapsed > opts.timeout:  # the caller stops the run
            raise DemoError(f"training did not finish within {opts.timeout:.0f}s (stopped it)\n{log_tails(status)}")
        await anyio.sleep(opts.poll_seconds)


async def run_workflow(client: Client, console: Console, opts: DemoOptions) -> None:
    console.step(1, "tools/list")
    tools = await client.list_tools()
    console.info(", ".join(sorted(t.name for t in tools.tools)))

    console.step(2, "rl_list_environments")
    listing, _ = await call(client, "rl_list_environments")
    names = [e["name"] for e in listing.get("environments", [])]
    console.info("found: " + ", ".join(names))
    if opts.environment not in names:
        raise DemoError(f"environment {opts.environment!r} not discovered (found {names})")

    console.step(3, f"rl_select_environment {opts.environment}")
    selected, _ = await call(client, "rl_select_environment", {"name": opts.environment})
    profile = selected["config"]["profile"]
    console.info(
        f"selected {selected['selected']}: {len(selected['config']['fields'])} config fields, "
        f"profile {profile['name']} ({profile['backend']} backend, model {profile['model']})"
    )

    console.step(4, "rl_get_current_config")
    config, _ = await call(client, "rl_get_current_config")
    console.info(
        summarize_config(config, ("group_size", "batch_size", "total_steps", "learning_rate", "tokenizer_name"))
    )

    edits = {**opts.edits, "total_steps": opts.steps}
    console.step(5, "rl_edit_config " + " ".join(f"{k}={v}" for k, v in edits.items()))
    for name, value in edits.items():
        await call(client, "rl_edit_config", {"field": name, "value": value})
    console.info(", ".join(f"{k} = {v}" for k, v in edits.items()))

    if opts.test_inference:
        console.step(6, "rl_test_inference (the local inference server, 1 step)")
        tested, _ = await call(client, "rl_test_inference", {"num_steps": 1, "group_size": 4})
        for model in tested["results"]:
            console.info(
                f"{model['model']}: {model['status']} in {model['seconds']:.0f}s, "
                f"{model['completions']} completions, mean score {model.get('mean_score')}, "
                f"accuracy {model.get('accuracy')}"
            )
            if model["status"] != "ok":
                tail = "\n".join(model.get("log_tail") or [])
                raise DemoError(f"rl_test_inference: {model['model']} {model['status']}: {model.get('error')}\n{tail}")
        console.info(f"environment_working = {tested['environment_working']}")

    console.step(7, "rl_start_training")
    started, _ = await call(client, "rl_start_training")
    run_id = started["run_id"]
    console.info(f"run {run_id}\nconfig {started['config_path']}\nlogs   {started['run_dir']}/logs/")

    console.step(8, "watching with rl_check_status")
    try:
        final = await watch(client, console, run_id, opts)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await client.call_tool("rl_stop_training", {"run_id": run_id})
        raise
    if final.get("status") != "completed":
        raise DemoError(f"run {run_id} ended {final.get('status')}: {final.get('error') or ''}\n{log_tails(final)}")

    console.step(9, "rl_get_results")
    results, raw = await call(client, "rl_get_results", {"run_id": run_id})
    images = [c for c in raw.content if getattr(c, "type", "") == "image"]
    if not images:
        raise DemoError("rl_get_results returned no reward-curve image")
    opts.plot.parent.mkdir(parents=True, exist_ok=True)
    opts.plot.write_bytes(base64.b64decode(images[0].data))

    history = results.get("history") or []
    rewards = [h.get("reward_mean") for h in history if h.get("reward_mean") is not None]
    console.step(10, "summary")
    lines = [f"run id         {run_id}", f"steps          {results.get('steps_completed')}"]
    if rewards:
        k = max(1, min(5, len(rewards) // 2))
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        lines.append(f"reward         first {k} steps {first:.3f} -> last {k} steps {last:.3f}")
    final = results.get("final_metrics") or {}
    if final.get("percent_correct") is not None:
        lines.append(f"correct        {final['percent_correct']:.0%} of the last step's replies")
    if results.get("eval_summary"):
        lines.append(f"held-out       {results['eval_summary']}")
    lines.append(f"weights        {results.get('final_weights')}")
    lines.append(f"reward curve   {opts.plot}")
    lines.append(f"state dir      {opts.home}")
    console.info("\n".join(lines))


def server_log_tail(path: Path) -> str:
    if not path.exists():
        return ""
    lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(["--- server log (last lines) ---", *lines])


async def demo(opts: DemoOptions, console: Console) -> None:
    opts.home.mkdir(parents=True, exist_ok=True)
    server_log = opts.home / "server.log"
    command, args = server_command()
    params = StdioServerParameters(
        command=command,
        # the demo owns this server: its runs end with it, however the demo ends
        args=[*args, "--stop-runs-on-exit", "--log-file", str(server_log)],
        env=server_environment(opts.home, opts.profile),
    )
    console.info(f"server: {command} {' '.join(params.args)}  (RL_MCP_HOME={opts.home})")
    try:
        async with Client(params, read_timeout_seconds=900) as client:
            await run_workflow(client, console, opts)
    except Exception as exc:
        cause = first_leaf(exc)
        if isinstance(cause, DemoError):
            raise cause from None
        # the server died or the connection broke: say so, with the server's log
        raise DemoError(f"{type(cause).__name__}: {cause}\n{server_log_tail(server_log)}") from exc


def first_leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    console = Console()
    started = time.monotonic()
    try:
        interrupts.run(demo, opts, console)  # a signal stops the run and the server before the demo exits
    except DemoError as exc:
        console.end_bar()
        print(f"\ndemo failed: {exc}", file=sys.stderr, flush=True)
        return 1
    except interrupts.Interrupted as exc:
        console.end_bar()
        print(f"\ndemo interrupted ({exc.signum.name})", file=sys.stderr, flush=True)
        return int(exc.code or 1)
    console.info(f"\ndone in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
