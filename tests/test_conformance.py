"""The MCP conformance suite (npm @modelcontextprotocol/conformance) against the real server over
Streamable HTTP, for the 2025-11-25 and the 2026-07-28 requirement sets.

Some scenarios call the suite's own fixtures (tools such as test_image_content, resources such as
test://static-text, prompts such as test_simple_prompt) that only its reference server has: their failing
checks are listed, each with its reason, in fixtures/conformance_expected_failures.json. Any other failing
check fails this test, in the suite's own words; so does an entry whose scenario or check the suite no
longer runs (the list stays true). An entry that passes is reported, not failed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / ".ci" / "mcp-conformance"  # runs the suite on the Node 22 that `make conformance` installs
INSTALLED = (ROOT / ".ci" / "node" / "node_modules" / ".bin" / "conformance").exists()
EXPECTED_FILE = Path(__file__).parent / "fixtures" / "conformance_expected_failures.json"
REQUIREMENTS = ("2025-11-25", "2026-07-28")
SUITE_TIMEOUT_S = 240  # both sets together, run side by side: about 10 s on an idle machine


@dataclass
class Check:
    scenario: str
    id: str
    failed: bool
    words: list[str]  # the suite's description, error message and spec reference of each failing instance


def _parse(output: str) -> dict[str, dict[str, Check]]:
    """Scenario -> check id -> Check, from the suite's output and each scenario's checks.json.

    The suite prints `=== Running scenario: NAME ===`, then `Results saved to DIR` once DIR/checks.json is
    written, and a summary line `✓|✗ NAME: N passed, M failed` per scenario. A scenario that ran but saved
    no results gets one failing check, `no-results`.
    """
    results: dict[str, dict[str, Check]] = {}
    scenario = None
    for line in output.splitlines():
        if match := re.match(r"=== Running scenario: (\S+) ===", line):
            scenario = match.group(1)
            results[scenario] = {}
        elif (match := re.match(r"Results saved to (.+)", line)) and scenario is not None:
            for entry in json.loads((Path(match.group(1).strip()) / "checks.json").read_text()):
                check = results[scenario].setdefault(entry["id"], Check(scenario, entry["id"], False, []))
                if entry["status"] == "FAILURE":
                    check.failed = True
                    words = f"{entry.get('description', '')}: {entry.get('errorMessage', '')}".strip(": ")
                    refs = [ref["url"] for ref in entry.get("specReferences") or [] if ref.get("url")]
                    check.words.append(words + (f" (see {refs[0]})" if refs else ""))
    summarized = re.findall(r"^[✓✗] (\S+): \d+ passed, \d+ failed", output, flags=re.MULTILINE)
    for name in {*summarized, *results}:
        if not results.get(name):
            results[name] = {"no-results": Check(name, "no-results", True, ["the suite saved no checks for it"])}
    return results


def _expected(requirements: str) -> dict[tuple[str, str], str]:
    """(scenario, check id) -> reason, for the entries of one requirement set."""
    entries = json.loads(EXPECTED_FILE.read_text())["expected_failures"]
    listed = [e for e in entries if requirements in e["requirements"]]
    return {(e["scenario"], check): e["reason"] for e in listed for check in e["checks"]}


def _run_suites(url: str, out: Path) -> dict[str, str]:
    """Both requirement sets against one server, side by side (most of each run waits on the server)."""
    procs: dict[str, tuple[subprocess.Popen, Path]] = {}
    for requirements in REQUIREMENTS:
        log = out / f"suite-{requirements}.log"
        cmd = [str(CONFORMANCE), "server", "--url", url, "--requirements", requirements, "-o", str(out / requirements)]
        with log.open("wb") as sink:
            proc = subprocess.Popen(cmd, cwd=out, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        procs[requirements] = (proc, log)
    deadline = time.monotonic() + SUITE_TIMEOUT_S
    outputs = {}
    try:
        for requirements, (proc, log) in procs.items():
            try:
                proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"the conformance suite ({requirements}) ran past {SUITE_TIMEOUT_S} s:\n{log.read_text()[-4000:]}"
                )
            outputs[requirements] = log.read_text(errors="replace")
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return outputs


@pytest.mark.skipif(
    not INSTALLED and not os.environ.get("CI"), reason="MCP conformance suite not installed: run `make conformance`"
)
def test_conformance_suite_over_streamable_http(rl_mcp_process, tmp_path: Path):
    served = rl_mcp_process("--transport", "http", "--host", "127.0.0.1", "--port", "0")  # empty RL_MCP_HOME
    outputs = _run_suites(served.url, tmp_path)
    problems: list[str] = []
    for requirements, output in outputs.items():
        results = _parse(output)
        if len(results) < 10:  # the suite could not run at all (no Node, no server): its own words
            problems.append(f"{requirements}: the suite ran {len(results)} scenarios:\n{output[-4000:]}")
            continue
        expected = _expected(requirements)
        for checks in results.values():
            for check in checks.values():
                if check.failed and (check.scenario, check.id) not in expected:
                    for words in check.words:
                        problems.append(f"{requirements} {check.scenario} / {check.id}: {words}")
        for (scenario, check_id), reason in expected.items():
            if scenario not in results or check_id not in results[scenario]:
                problems.append(
                    f"{requirements}: {EXPECTED_FILE.name} lists {scenario} / {check_id} ({reason}), "
                    "which the suite no longer runs: remove the entry"
                )
            elif not results[scenario][check_id].failed:
                warnings.warn(
                    f"{requirements} {scenario} / {check_id} passes now: its entry in {EXPECTED_FILE.name} can go",
                    stacklevel=1,
                )
    if problems:
        # the INFO lines are mostly the fixtures the suite asked for in vain ("Unknown tool: test_...")
        server_log = "\n".join([line for line in served.stderr_text().splitlines() if " INFO " not in line][-40:])
        pytest.fail(
            f"{len(problems)} unexpected conformance result(s):\n  "
            + "\n  ".join(problems)
            + f"\n(suite output and results under {tmp_path}; server log, last lines but INFO:)\n{server_log}",
            pytrace=False,
        )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_prompt_errors_are_invalid_params_with_the_reason(mcp_app, mode: str):
    """Found by the suite's prompt scenarios: prompts/get refused with -32602 and why (MCP server/prompts,
    "Error Handling"), not "Internal server error" (2026-07-28) or code 0 without the reason (2025-11-25)."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    asks = [
        ("nope", {}, "Unknown prompt: nope"),
        ("rl_workflow", {}, "Missing required arguments: environment"),
        ("rl_workflow", {"environment": "../x"}, "invalid environment name '../x'"),
        ("rl_workflow", {"environment": "nosuchenv"}, "unknown environment 'nosuchenv'"),
    ]
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        for name, arguments, words in asks:
            with pytest.raises(MCPError) as refused:
                await client.get_prompt(name, arguments)
            assert refused.value.code == INVALID_PARAMS and words in refused.value.message, (name, arguments)
        assert (await client.get_prompt("rl_workflow", {"environment": "arithmetic"})).messages
