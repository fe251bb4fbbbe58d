"""A policy loss from another package (tests/plugins/toy_loss: one file and its pyproject.toml, outside
the product) installed as a user installs one, then named in the `rl_mcp.losses` entry-point group:
refused before it is installed, then (the introspected fields read again, not taken from the cache)
listed, described and trained on the local backend through the MCP tools (test_skyrl_engine.py's
fork C trains it through SkyRL's engine). A plugin that cannot be loaded is left out with the reason,
and the product's losses stay."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from test_runs_mcp import call, configure, environ, serving, wait_status

from tinker_atropos.run_files import RunFiles, read_jsonl

PLUGIN = Path(__file__).parent / "plugins" / "toy_loss"


def install_plugin(plugin: Path, where: Path) -> Path:
    """A plugin's package installed into a folder of its own (as `pip install --target`), which a
    process's PYTHONPATH then puts on its path: the folder."""
    source, site = where / f"{plugin.name}-source", where / f"{plugin.name}-site"
    shutil.copytree(plugin, source)  # the build writes beside its sources: never into the checkout
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*argv, "--target", str(site), str(source)], check=True, timeout=120)
    return site


def install_toy_loss(where: Path) -> Path:
    return install_plugin(PLUGIN, where)


def losses_in_a_process(pythonpath: str) -> subprocess.CompletedProcess[str]:
    code = "from tinker_atropos.losses import LOSSES; print(' '.join(LOSSES))"
    env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_a_plugin_that_cannot_be_loaded_is_left_out_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text("[rl_mcp.losses]\nnowhere = no_such_module:Loss\nnot_a_loss = os:sep\n")
    listed = losses_in_a_process(str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["importance_sampling", "ppo", "cispo", "dro", "cross_entropy"]
    assert "loss nowhere (no_such_module:Loss) left out: it cannot be loaded" in listed.stderr
    assert "loss not_a_loss (os:sep) left out: it is no tinker_atropos.losses.base.Loss" in listed.stderr


@pytest.mark.anyio
async def test_an_installed_loss_is_listed_described_and_trains_on_the_local_backend(tmp_path: Path) -> None:
    site = install_toy_loss(tmp_path)
    assert losses_in_a_process(str(site)).stdout.split()[-1] == "sign_pg"
    async with serving(environ(tmp_path / "before")) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="letter_repeat")  # the product's fields read, cached
        refused = await client.call_tool("rl_edit_config", {"field": "loss_fn", "value": "sign_pg"})
        assert refused.is_error and "expected one of 'importance_sampling'" in str(refused.content)
    env = environ(tmp_path / "home", PYTHONPATH=str(site))  # the same cache: installed since, so read again
    async with serving(env) as (_, server), Client(server) as client:
        await configure(client, "letter_repeat")
        await call(client, "rl_edit_config", field="total_steps", value=2)
        edited = await call(client, "rl_edit_config", field="loss_fn", value="sign_pg")
        assert edited, edited
        config = await call(client, "rl_get_current_config")
        assert "sign_pg (-sign(A)*logp: a plugin's)" in str(config), config
        started = await call(client, "rl_start_training")
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped"}, timeout=300)
        assert done["status"] == "completed", (done.get("error"), done.get("failure_log_tail"))
    metrics = read_jsonl(RunFiles(Path(started["run_dir"])).metrics)
    assert [m["step"] for m in metrics] == [1, 2] and all(math.isfinite(m["loss"]) for m in metrics), metrics
