"""Children forked from a warm template behave as the same command started cold.

Real templates, real forks: each check runs one script both ways and compares what it saw (argv,
folder, sys.path, environment, TMPDIR, streams, exit code, /proc) and how it ended (an exit code, an
exception, a signal). The template is the product's own (`rl_mcp.children.warm_template`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from rl_mcp import processes, warm_start
from rl_mcp.warm_start.eligibility import TemplateKey, template_key

SCRIPT = r"""
import json, os, sys, tempfile, time
from pathlib import Path
import wandb.sdk.data_types._private as media
from huggingface_hub import constants
mode = os.environ.get("RL_MCP_TEST_MODE", "")
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "tmp": tempfile.gettempdir(),
    "var": os.environ.get("RL_MCP_TEST_VAR"), "secret": os.environ.get("WANDB_API_KEY"),
    "media": media.MEDIA_TMP.name, "stdin": sys.stdin.read(), "name": __name__,
    "offline": constants.HF_HUB_OFFLINE, "warm": "torch" in sys.modules and mode != "import",
}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if mode == "raise":
    raise KeyError("boom")
if mode == "message":
    sys.exit("a message")
if mode == "sleep":
    Path(os.environ["RL_MCP_TEST_READY"]).write_text("up")
    time.sleep(60)
sys.exit(int(os.environ.get("RL_MCP_TEST_CODE", "0")))
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "child.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    """The test process's environment, a template for it started and ready (one for the module's
    forks: each child is its own fork); stopped afterwards."""
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base.pop("RL_MCP_WARM_START", None)
    warm_start.prepare(sys.executable, base)
    deadline = time.monotonic() + 120
    while not warm_start.ready(sys.executable, base):
        assert time.monotonic() < deadline, "the template did not come up in 120 s"
        time.sleep(0.1)
    yield base
    warm_start.stop_templates()


def start(script: Path, env: dict[str, str], tmp: Path, log: Path, **extra: str) -> processes.Child:
    tmp.mkdir(exist_ok=True)
    child_env = {**env, "TMPDIR": str(tmp), **extra}
    return processes.spawn("child", [sys.executable, str(script), "a", "b c"], log_path=log, env=child_env, cwd=tmp)


def finish(child: processes.Child, timeout: float = 60) -> int | None:
    deadline = time.monotonic() + timeout
    while child.running:
        assert time.monotonic() < deadline, f"{child} still running"
        time.sleep(0.05)
    return child.poll()


def seen(log: Path) -> dict:
    return json.loads(log.read_text().splitlines()[0])


def test_a_forked_child_sees_what_a_cold_one_sees(script: Path, env: dict[str, str], tmp_path: Path) -> None:
    runs = {}
    for how, extra in (("warm", {}), ("cold", {"RL_MCP_WARM_START": "0"})):
        log = tmp_path / f"{how}.log"
        offline = "0" if env.get("HF_HUB_OFFLINE") == "1" else "1"  # not the template's
        child = start(
            script, env, tmp_path / how, log, RL_MCP_TEST_VAR=how, RL_MCP_TEST_CODE="3", HF_HUB_OFFLINE=offline, **extra
        )
        assert (child.warm is not None) == (how == "warm") and (child.popen is not None) == (how == "cold")
        assert finish(child) == 3
        runs[how] = seen(log), log.read_text().splitlines()[1:]
    (warm, warm_rest), (cold, cold_rest) = runs["warm"], runs["cold"]
    assert warm.pop("warm") is True and cold.pop("warm") is False  # torch came with the fork, not an import
    for what, out in (("warm", warm), ("cold", cold)):
        folder = tmp_path / what
        assert out["argv"] == [str(script), "a", "b c"] and out["name"] == "__main__"
        assert out["cwd"] == str(folder) and out["path0"] == str(script.parent)
        assert out["tmp"] == str(folder) and out["var"] == what and out["stdin"] == ""
        assert out["offline"] is (offline == "1")
        assert Path(out["media"]).parent == folder and Path(out["media"]).name.endswith("wandb-media")
    assert warm_rest == cold_rest == ["to stderr"]
    assert not list((tmp_path / "warm").glob("tmp*wandb-media"))  # removed at exit, as a cold child does


def test_a_forked_child_shows_its_own_command_line_and_environment(
    script: Path, env: dict[str, str], tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    child = start(
        script, env, tmp_path / "tmp", tmp_path / "log", RL_MCP_TEST_MODE="sleep", RL_MCP_TEST_READY=str(ready)
    )
    try:
        assert child.warm is not None
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and child.running, (tmp_path / "log").read_text()
            time.sleep(0.05)
        proc = psutil.Process(child.pid)
        assert proc.cmdline() == [sys.executable, str(script), "a", "b", "c"]  # one string, split at spaces
        assert proc.environ()["TMPDIR"] == str(tmp_path / "tmp") and proc.environ()["RL_MCP_TEST_MODE"] == "sleep"
        assert proc.name() == "child.py" and os.getpgid(child.pid) == child.pid  # its own session
        assert anyio.run(processes.stop, child) == -signal.SIGTERM
    finally:
        if child.running:
            os.killpg(child.pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("mode", "code", "line"), [("raise", 1, "KeyError: 'boom'"), ("message", 1, "a message"), ("", 0, "to stderr")]
)
def test_a_forked_child_ends_as_python_would(
    script: Path, env: dict[str, str], tmp_path: Path, mode: str, code: int, line: str
) -> None:
    child = start(script, env, tmp_path / "tmp", tmp_path / "log", RL_MCP_TEST_MODE=mode)
    assert child.warm is not None
    assert finish(child) == code
    assert (tmp_path / "log").read_text().rstrip().splitlines()[-1] == line


def test_a_template_leaves_with_its_owner_and_removes_its_folder(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time; from rl_mcp import warm_start; "
            "warm_start.prepare(sys.executable, dict(os.environ)); print(flush=True); time.sleep(600)",
        ],
        env={**{k: v for k, v in os.environ.items() if k != "RL_MCP_WARM_START"}, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == b"\n"
        template = next(p for p in psutil.Process(owner.pid).children() if "warm_template" in " ".join(p.cmdline()))
        folder = next(tmp_path.glob("rl-mcp-warm-*"))
        deadline = time.monotonic() + 120
        while not (folder / "template.sock").exists():
            assert time.monotonic() < deadline and template.is_running()
            time.sleep(0.1)
    finally:
        owner.kill()  # no atexit: only the template itself notices
        owner.wait()
    deadline = time.monotonic() + 10
    while folder.exists() or (template.is_running() and template.status() != psutil.STATUS_ZOMBIE):
        assert time.monotonic() < deadline, "the template outlived its owner by 10 s"
        time.sleep(0.1)


def test_which_children_a_template_may_fork() -> None:
    py = sys.executable
    env = {"HOME": "/h", "HF_HUB_OFFLINE": "1", "TMPDIR": "/t", "RL_MCP_HOME": "/r", "WANDB_API_KEY": "k"}
    key = template_key([py, "-m", "tinker_atropos.export"], env, py)
    assert key == TemplateKey(py, (("HOME", "/h"),))  # run-time variables left out
    same = {**env, "TMPDIR": "/u", "RL_MCP_HOME": "/s", "TINKER_API_KEY": "x", "PYTHONUNBUFFERED": "1"}
    assert template_key([py, "launch_training.py", "--config", "c"], same, py) == key
    assert template_key([py, "-m", "x"], {**env, "HF_HUB_OFFLINE": "0"}, py) == key  # set again after the fork
    used = {"TOKENIZERS_PARALLELISM": "false", "TORCHINDUCTOR_CACHE_DIR": "/tmp/i"}  # read where used
    assert template_key([py, "-m", "x"], {**env, **used}, py) == key
    assert template_key([py, "-m", "x"], {**env, "TOKENIZERS_CACHE": "/c"}, py) != key  # the prefix still counts
    assert template_key([py, "-m", "x"], {**env, "ATEN_CPU_CAPABILITY": "avx2"}, py) != key  # read at import
    assert template_key(["/other/venv/bin/python", "-m", "x"], env, py) is None
    assert template_key([py, "-u", "-m", "x"], env, py) is None
    assert template_key([py, "-m"], env, py) is None
    assert template_key(["run-api", "--port", "1"], env, py) is None
    assert template_key([py, "-m", "x"], {**env, "RL_MCP_WARM_START": "0"}, py) is None
    assert template_key([py, "-m", "x"], env, py, platform="darwin") is None  # fork, /proc and prctl: Linux


def test_a_package_installed_where_children_import_from_needs_a_new_template(tmp_path: Path) -> None:
    """A loss or an environment's package installed into a PYTHONPATH folder (or the interpreter's
    site-packages) after a template started: the template would fork children that cannot see it."""
    from rl_mcp.warm_start.templates import _key_for_children_of

    env = {"HOME": "/h", "PYTHONPATH": str(tmp_path)}
    before = _key_for_children_of(sys.executable, env)
    assert before is not None and before == _key_for_children_of(sys.executable, env)
    time.sleep(0.01)  # a later mtime on any filesystem that keeps nanoseconds
    (tmp_path / "rl_mcp_toy_loss-0.1.0.dist-info").mkdir()
    after = _key_for_children_of(sys.executable, env)
    assert after is not None and after != before and after.env == before.env
