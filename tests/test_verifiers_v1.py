"""verifiers 0.4.0 (v1) environments run from their own code in their own venv (`make verifiers-v1`):
v1_child.py against the product's standalone inference server (SmolLM2), its rollouts' sequences
checked token by token against what the server sampled and what its /logprobs recomputes.

The two environments are ours (tests/byo_envs/verifiers/): `echo_taskset`, a plain Taskset on
verifiers' `null` harness, and `adder_tools_v1`, an `add` tool in a Toolset whose episodes always
have two model turns (a reply without a tool call gets a hint).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from numerics import logprob_tol
from test_inference_server import standalone, standalone_config, wait_healthy
from transformers import AutoConfig, AutoTokenizer

from tinker_atropos.models import ensure_model
from tinker_atropos.venvs import V1

V1_PYTHON = V1.python(os.environ)
CHILD = V1.child_file
VERIFIERS_DIR = Path(__file__).parent / "byo_envs" / "verifiers"
MODEL = "smollm2-135m"  # tiny-chat spends a token per character: the tool prompt alone would be ~900
# per environment: its config's fields, the model turns of each episode
CASES = {"echo_taskset": ({"num_tasks": 3}, 1), "adder_tools_v1": ({"taskset": {"num_tasks": 3}}, 2)}
# per environment, the Python programs a rollout starts: its harness program per model turn, a tool
# server per toolset
PROGRAMS = {"echo_taskset": 1, "adder_tools_v1": 2 + 1}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not V1_PYTHON.exists(), reason="run `make verifiers-v1` first (verifiers 0.4.0's venv)"),
]


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The product's standalone inference server with SmolLM2; its URL."""
    folder, inference = tmp_path_factory.mktemp("v1-server"), port()
    log = folder / "server.log"
    proc = standalone(standalone_config(folder, inference, port(), MODEL), log)
    url = f"http://127.0.0.1:{inference}"
    try:
        wait_healthy(proc, url, log, 120)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def one_group(env_file: Path, args: dict[str, Any], url: str, home: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The child's ready line, its answer to one request of n=2 (stdin closed after it: it exits)
    and its log."""
    request = {
        "id": 7,
        "split": "train",
        "index": 1,
        "n": 2,
        "model": MODEL,
        "base_url": f"{url}/v1",
        "sampling": {"temperature": 1.0, "max_tokens": 24},
    }
    command = [str(V1_PYTHON), str(CHILD), "--file", str(env_file), "--args", json.dumps(args)]
    proc = subprocess.Popen(
        [*command, "--tokenizer", str(ensure_model(MODEL))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # verifiers keeps its runtime folders under ~/.cache/verifiers: this test's, not the machine's
        env={**os.environ, "HOME": str(home), "RL_MCP_VERIFIERS_API_KEY": "local"},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(json.dumps(request) + "\n", timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-4000:]
    ready, reply = (json.loads(line) for line in out.splitlines())
    assert "error" not in reply, (reply, err[-4000:])
    return ready, reply, err


def port_files_left(before: set[Path]) -> set[Path]:
    """verifiers' `/tmp/vf-port-*` files made since `before` that outlive their read-back: another
    worker's launch holds one for at most a 1 s poll, so a file still there 3 s on was left."""
    new = set(Path("/tmp").glob("vf-port-*")) - before
    if new:
        time.sleep(3)
    return {p for p in new if p.exists()}


def sampled_spans(ids: list[int], mask: list[bool]) -> list[list[int]]:
    spans: list[list[int]] = []
    for i, (token, sampled) in enumerate(zip(ids, mask)):
        if sampled:
            if i == 0 or not mask[i - 1]:
                spans.append([])
            spans[-1].append(token)
    return spans


@pytest.mark.parametrize("env_name", list(CASES))
def test_a_v1_environment_answers_a_group_with_the_tokens_the_server_sampled(
    env_name: str, server: str, tmp_path: Path
) -> None:
    args, turns = CASES[env_name]
    started, port_files = time.monotonic(), set(Path("/tmp").glob("vf-port-*"))
    ready, reply, log = one_group(VERIFIERS_DIR / f"{env_name}.py", args, server, tmp_path)
    print(f"{env_name}: load + one group of 2 in {time.monotonic() - started:.1f} s; {log.splitlines()[-1]}")
    # each of them came from the child's warm process (v1_warm), verifiers imported already
    forked = re.search(r"warm starts: (\d+) programs forked", log)
    assert forked and int(forked[1]) == 2 * PROGRAMS[env_name], log[-2000:]
    assert not port_files_left(port_files)  # a tool server's port file is removed once read back
    assert ready == {"ready": True, "train": 3, "eval": 3} and reply["id"] == 7
    tokenizer = AutoTokenizer.from_pretrained(str(ensure_model(MODEL)))
    config = AutoConfig.from_pretrained(str(ensure_model(MODEL)))
    assert len(reply["rollouts"]) == 2
    for rollout in reply["rollouts"]:
        assert isinstance(rollout["reward"], float) and rollout["error"] is None, rollout
        assert all(isinstance(v, float) for v in rollout["metrics"].values()) and rollout["metrics"]
        seq = rollout["sequence"]
        ids, mask, logprobs = seq["token_ids"], seq["sampled_mask"], seq["logprobs"]
        assert len(ids) == len(mask) == len(logprobs) > 0
        messages = [*rollout["prompt"], *rollout["completion"]]
        assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in messages)
        replies = [m for m in rollout["completion"] if m["role"] == "assistant"]
        assert len(replies) == turns, rollout["completion"]  # the hint makes the tool episode two turns
        # each run of sampled tokens is one reply, as the model wrote it (its stop token included)
        spans = sampled_spans(ids, mask)
        assert [tokenizer.decode(s, skip_special_tokens=True) for s in spans] == [m["content"] for m in replies]
        # everything else is the prompt, the environment's turns and the template's scaffolding
        not_sampled = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        for message in messages:
            if message["role"] != "assistant":
                assert message["content"] in not_sampled, (message, not_sampled)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
        sampled = [lp for lp, m in zip(logprobs, mask) if m]
        again = httpx.post(f"{server}/logprobs", json={"input_ids": ids}, timeout=120).json()["logprobs"]
        recomputed = [lp for lp, m in zip(again, mask) if m]
        # the sampler's (a KV-cached decode, in a batch of two) and one forward pass over the whole
        # sequence round differently: numerics.logprob_tol over these positions at these logprobs' size
        tol = logprob_tol(config, len(ids), max(abs(x) for x in sampled) + 1.0)
        assert recomputed == pytest.approx(sampled, abs=tol)


def test_a_harness_script_is_written_once_and_whole(tmp_path: Path) -> None:
    """A group's rollouts run the same harness script at once: written in place, one rollout ran
    the file another had just truncated (an empty episode, no error) or half written (a
    SyntaxError). It is written whole under its name, and a file already there is not touched."""
    probe = (
        "import sys, os; from pathlib import Path\n"
        f"sys.path.insert(0, {str(CHILD.parent)!r})\n"
        "import v1_child\n"
        "path = Path(sys.argv[1]) / 'scripts' / 'abc.py'\n"
        "v1_child._write_once(path, b'print(1)\\n')\n"
        "os.utime(path, ns=(10**9, 10**9))\n"
        "first = os.stat(path)\n"
        "v1_child._write_once(path, b'print(1)\\n')\n"
        "again = os.stat(path)\n"
        "print((first.st_ino, first.st_mtime_ns) == (again.st_ino, again.st_mtime_ns),"
        " path.read_bytes() == b'print(1)\\n', sorted(os.listdir(path.parent)))\n"
    )
    out = subprocess.run([str(V1_PYTHON), "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().split(maxsplit=2) == ["True", "True", "['abc.py']"]


WARM_PROBE = r"""
import asyncio, json, os, signal, sys
sys.path.insert(0, sys.argv[1])
import v1_warm
import verifiers.v1
program, log = sys.argv[2], sys.argv[3]
warm = v1_warm.start(close=[])
PIPE, STDOUT = asyncio.subprocess.PIPE, asyncio.subprocess.STDOUT

async def ran(aio):  # as the runtime's run() and open_process(): pipes, input, an exit code
    p = await aio.create_subprocess_exec(sys.executable, program, "3", stdin=PIPE, stdout=PIPE, stderr=PIPE,
                                         env=dict(os.environ), start_new_session=True)
    out, err = await p.communicate(b"hello\n")
    return [out.decode(), err.decode(), p.returncode]

async def in_background(aio):  # as run_background(): a log file, stderr into it
    with open(log, "wb") as f:
        p = await aio.create_subprocess_exec(sys.executable, program, "0", stdout=f, stderr=STDOUT,
                                             env=dict(os.environ), start_new_session=True)
    code = await p.wait()
    return [open(log).read(), code]

async def killed(aio):  # as the runtime stops a program: its whole process group
    p = await aio.create_subprocess_exec(sys.executable, "-m", "sleeper", stdout=PIPE, stderr=PIPE,
                                         env=dict(os.environ), start_new_session=True, cwd=os.path.dirname(program))
    ready = await p.stdout.readline()
    os.killpg(os.getpgid(p.pid), signal.SIGKILL)
    return [ready.decode(), await p.wait()]

async def main():
    seen = {}
    for name, aio in (("cold", asyncio), ("warm", v1_warm._AsyncioWithWarmStarts(warm))):
        seen[name] = [await ran(aio), await in_background(aio), await killed(aio)]
    print(json.dumps({**seen, "forked": warm.forked, "warm_module": "verifiers.v1" in sys.modules}))

asyncio.run(main())
"""
PROGRAM = r"""
import sys
line = sys.stdin.readline()
print(line.strip().upper() or "no input", "verifiers" in sys.modules, __name__)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_warm_program_behaves_as_the_same_program_started_cold(tmp_path: Path) -> None:
    """verifiers' runtime starts a rollout's programs three ways (run, open_process,
    run_background) and stops them by process group: each gives what asyncio's own subprocess
    gives, but for having verifiers imported already."""
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    (tmp_path / "sleeper.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    probe = [str(V1_PYTHON), "-c", WARM_PROBE, str(CHILD.parent), str(program), str(tmp_path / "log")]
    out = subprocess.run(probe, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    assert seen["forked"] == 3 and seen["warm_module"]
    cold, warm = seen["cold"], seen["warm"]
    assert cold[0] == ["HELLO False __main__\n", "to stderr\n", 3]
    assert warm[0] == ["HELLO True __main__\n", "to stderr\n", 3]
    assert cold[1] == ["no input False __main__\nto stderr\n", 0]
    assert warm[1] == ["no input True __main__\nto stderr\n", 0]
    assert cold[2] == warm[2] == ["up\n", -signal.SIGKILL]
