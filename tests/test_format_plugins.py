"""An environment format from another package (tests/plugins/toy_format: one file and its
pyproject.toml, outside the product) installed as a user installs one, then named in the
`rl_mcp.formats` entry-point group: a real server process (stdio) lists a file of that format among
its environments, selects it, tests it and trains it 2 steps. Importing the format imports no
atroposlib: the server stays light."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_loss_plugins import install_plugin
from test_runs_mcp import call, environ, wait_status

from tinker_atropos.run_files import RunFiles, read_jsonl

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).parent / "plugins" / "toy_format"
PAIRS = [(f"Repeat this letter 4 times: {c}", c * 4) for c in "abcdefgh"]


def formats_in_a_process(pythonpath: str) -> list[str]:
    code = (
        "import sys; from rl_mcp.formats import FORMATS; import qa_pairs; "
        "assert 'atroposlib' not in sys.modules, 'the format imported atroposlib'; print(' '.join(FORMATS))"
    )
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


async def test_an_installed_format_is_listed_selected_tested_and_trained(tmp_path: Path) -> None:
    site = install_plugin(PLUGIN, tmp_path)
    assert formats_in_a_process(str(site))[-1] == "qa-pairs"
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "repeats.py").write_text(f'"""Letters to repeat."""\n\nQA_PAIRS = {PAIRS!r}\n')
    env = environ(tmp_path / "home", RL_MCP_ENV_DIRS=str(envs), PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rl_mcp", "serve", "--stop-runs-on-exit"], env=env, cwd=str(ROOT)
    )
    with (tmp_path / "server.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            listed = await call(client, "rl_list_environments")
            ours = {e["name"]: e for e in listed["environments"]}["qa:repeats"]
            assert (ours["format"], ours["description"]) == ("qa-pairs", "8 question-answer pairs"), ours
            await call(client, "rl_select_environment", name="qa:repeats")
            config = await call(client, "rl_get_current_config")
            fields = {f["name"] for f in config["fields"]}
            assert config["format"] == "qa-pairs" and "repeat" not in fields and "qa_file" not in fields, fields
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=2)
            result = tested["results"][0]
            assert (result["status"], result["steps_tested"], result["completions"]) == ("ok", 1, 2), result
            for field, value in {"total_steps": 2, "group_size": 4, "batch_size": 8}.items():
                await call(client, "rl_edit_config", field=field, value=value)
            started = await call(client, "rl_start_training")
            done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped"}, timeout=300)
            assert done["status"] == "completed", (done.get("error"), done.get("failure_log_tail"))
    run = Path(started["run_dir"])
    assert f"qa_file: {envs / 'repeats.py'}" in (run / "config.yaml").read_text()
    metrics = read_jsonl(RunFiles(run).metrics)
    assert [m["step"] for m in metrics] == [1, 2] and all(math.isfinite(m["loss"]) for m in metrics), metrics
