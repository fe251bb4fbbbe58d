"""[env-packages] Environment folders as packages: a folder with a pyproject.toml is listed once under
its module, installed on first use with its declared dependency into a venv of its own layered on its
generation's (never changing that venv), then scored and trained; a pin the venv cannot meet is refused
before anything runs; a missing module is named with its venv and the command that adds it there.

The folders are ours (tests/byo_envs/env_packages*): each declares one small pure-Python dependency
that no venv of the product has (roman, humanize, inflection), or a pin that conflicts (idna==3.6).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from test_byo_atropos import call
from test_progress import call_with_progress
from test_runs_resume_e2e import ended, refused, wait_for
from test_verifiers_runs import PACKAGES as VERIFIERS_PACKAGES
from test_verifiers_runs import SMALL, settings
from tiny_profiles import MAX_TOKEN_LENGTH, on_tiny_chat

from rl_mcp.app import open_app
from rl_mcp.doctor import report
from rl_mcp.environments.discovery import Discovery
from rl_mcp.environments.missing_module import ModuleHome, explain
from rl_mcp.environments.packages import resolve
from rl_mcp.environments.packages.install import EnvPackages, installed, site_dirs
from rl_mcp.mcp_api.server import build_server
from tinker_atropos.run_files import RunFiles, read_jsonl
from tinker_atropos.venvs import CLASSIC, V1, Generation

pytestmark = pytest.mark.anyio
BYO = Path(__file__).parent / "byo_envs"
PACKAGES_DIR, CONFLICT_DIR, MISSING_DIR = BYO / "env_packages", BYO / "env_packages_conflict", BYO / "missing_module"
OTHER_TESTS_PACKAGES = tuple(module for _, _, module in VERIFIERS_PACKAGES.values())
PRODUCT_VENV = Path(sys.executable).parent.parent
# per folder: its generation (None: Atropos, on the product's venv), profile (run on tiny-chat:
# tests/tiny_profiles.py), config edits, its dependency
CASES: dict[str, tuple[Generation | None, str, dict[str, Any], str]] = {
    "vf_roman_numerals": (CLASSIC, "local", {"num_examples": 6}, "roman"),
    "vf_v1_humanize": (V1, "smollm2", {"taskset": {"num_tasks": 6}}, "humanize"),
    "atropos_inflect": (None, "local", {"reply_tokens": 8}, "inflection"),
}
ATROPOS_SMALL = {
    "total_steps": 2,
    "group_size": 2,
    "batch_size": 4,
    "max_token_length": 1024,
    "ensure_scores_are_not_same": False,
}


def venv_of(generation: Generation | None) -> Path:
    return generation.python(os.environ).parent.parent if generation else PRODUCT_VENV


def contents(venv: Path) -> list[str]:
    """What a venv has installed: its site-packages' entries."""
    return sorted(p.name for site in site_dirs(venv) for p in site.iterdir() if p.name != "__pycache__")


def assert_unchanged(venv: Path, before: list[str]) -> None:
    """`venv` as it was, but for the packages another test of the suite installs there meanwhile and
    removes (test_verifiers_runs' installed_package, as a user adds a published environment)."""
    changed = set(contents(venv)) ^ set(before)
    assert all(name.startswith(OTHER_TESTS_PACKAGES) for name in changed), sorted(changed)


def skip_without(generation: Generation | None) -> None:
    if generation is not None and not generation.python(os.environ).exists():
        pytest.skip(f"run `mcp-server-rl setup {generation.runtime}` first (make test does)")


# --- pure ---------------------------------------------------------------------------------------


def test_a_folder_is_listed_once_under_its_module_with_its_format() -> None:
    catalog = Discovery((PACKAGES_DIR, CONFLICT_DIR)).scan()
    listed = {n: (e.format, e.package.module if e.package else None) for n, e in catalog.environments.items()}
    assert listed == {
        "vf_roman_numerals": ("verifiers", "vf_roman_numerals"),
        "vf_v1_humanize": ("verifiers-v1", "vf_v1_humanize"),
        "atropos_inflect": ("atropos", "atropos_inflect"),
        "vf_conflict_pin": ("verifiers", "vf_conflict_pin"),
    }
    assert not catalog.errors and not catalog.shadowed
    roman = catalog.environments["vf_roman_numerals"]
    assert roman.entry == "vf_roman_numerals" and roman.file.name == "__init__.py"  # loaded by module, as installed


def test_a_conflict_names_the_folders_own_pin_first_and_who_asks_for_it() -> None:
    plan = resolve.planned(
        {
            "install": [
                {"metadata": {"name": "httpx", "version": "0.1", "requires_dist": ["idna"]}},
                {"metadata": {"name": "idna", "version": "3.6"}},
                {"metadata": {"name": "roman", "version": "5.2"}},
            ]
        }
    )
    found = resolve.conflicts(plan, {"idna": "3.20", "httpx": "0.28.1"}, ["idna==3.6", "roman"], "my-env")
    assert [(c.name, c.wanted, c.installed) for c in found] == [("idna", "3.6", "3.20"), ("httpx", "0.1", "0.28.1")]
    assert found[0].required_as == ("idna==3.6 (by my-env)", "idna (by httpx)")
    assert "No matching distribution" in resolve.pip_failure("ERROR: No matching distribution found for nope-pkg==9")


def test_a_missing_module_is_named_with_its_venv_its_distribution_and_the_command(tmp_path: Path) -> None:
    text = (
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'reasoning_gym'\n\n"
        "ImportError: ReasoningGymEnv requires reasoning-gym. Install with: uv add 'verifiers[rg]'\n"
    )
    venv = tmp_path / "venv"
    message = explain(text, ModuleHome(venv, "the verifiers venv", lookup=tuple(site_dirs(PRODUCT_VENV))))
    assert message is not None and f"{venv}/bin/python -m pip install reasoning-gym" in message, message
    assert message.index("To add it there") < message.index("uv add"), message  # the original kept below
    assert explain("ValueError: bad", ModuleHome(venv, "x")) is None


# --- through the MCP tools ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("env_name", list(CASES))
async def test_a_folder_is_installed_on_first_use_then_scored_and_trained(
    env_name: str, rl_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    generation, profile, edits, dependency = CASES[env_name]
    skip_without(generation)
    envs = tmp_path / "envs"
    shutil.copytree(PACKAGES_DIR / env_name, envs / env_name)
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(envs))
    parent, before = venv_of(generation), contents(venv_of(generation))
    on_tiny = str(on_tiny_chat(profile, tmp_path))
    async with open_app(settings(on_tiny, stop_runs_on_exit=True)) as app, Client(build_server(app)) as client:
        # an Atropos file is imported for its fields: its folder is installed at its selection, with progress
        # (its pip lines, then the fields' loading, values rising throughout)
        _, selecting = await call_with_progress(client, "rl_select_environment", name=env_name)
        assert len(installed(rl_home)) == (0 if generation else 1)
        assert any(m.startswith("installing environment") for m in selecting.messages) == (generation is None)
        small = {**SMALL, "max_token_length": MAX_TOKEN_LENGTH[profile]} if generation else ATROPOS_SMALL
        for field, value in {**small, **edits}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        started = time.monotonic()
        args = {"num_steps": 1, "group_size": 2, "timeout_s": 300}
        answer, testing = await call_with_progress(client, "rl_test_inference", **args)
        (model,) = answer["results"]
        assert model["status"] == "ok", (model["error"], model["log_tail"])
        print(f"{env_name}: installed and scored in {time.monotonic() - started:.1f} s")
        (record,) = installed(rl_home)
        assert record.environment == env_name and record.hash
        assert any(d.startswith(f"{dependency}==") for d in record.distributions), record
        if generation is not None:  # installed by this call, its progress shown before its scored groups
            assert any(m.startswith("installing environment") for m in testing.messages), testing.seen
            assert any("Successfully installed" in m for m in testing.messages), testing.seen
            assert "scored" in testing.messages[-1], testing.seen
        venv = rl_home / "env-venvs" / env_name
        assert any(p.startswith(dependency) for p in contents(venv))
        assert_unchanged(parent, before)
        run = await call(client, "rl_start_training")
        status = await wait_for(client, run["run_id"], ended, 420)
    assert status["status"] == "completed" and status["step"] == 2, status
    assert [m["step"] for m in read_jsonl(RunFiles(Path(run["run_dir"])).metrics)] == [1, 2]
    assert installed(rl_home) == [record]  # used again, unchanged: not reinstalled
    lines, _ = report({"RL_MCP_HOME": str(rl_home), "RL_MCP_ENV_DIRS": str(envs)})
    assert any(line.startswith(f"env folder    {env_name}") for line in lines), lines
    assert any(f"{dependency}==" in line for line in lines), lines


@pytest.mark.slow
async def test_a_changed_folder_is_reinstalled_and_an_unchanged_one_is_not(rl_home: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(PACKAGES_DIR / "atropos_inflect", tmp_path / "atropos_inflect")
    info = Discovery((tmp_path,)).scan().environments["atropos_inflect"]
    assert info.package is not None
    packages = EnvPackages(rl_home, {}, sys.executable)
    first = (await packages.ensure(info.name, info.package, info.format)).installed
    again = (await packages.ensure(info.name, info.package, info.format)).installed
    assert first is not None and again == first
    (folder / "atropos_inflect.py").write_text((folder / "atropos_inflect.py").read_text() + "\n# changed\n")
    changed = (await packages.ensure(info.name, info.package, info.format)).installed
    assert changed is not None and changed.hash != first.hash and changed.installed_at > first.installed_at


@pytest.mark.slow
async def test_a_conflicting_pin_is_refused_at_once_naming_it_and_the_venv_is_unchanged(
    rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_without(CLASSIC)
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(CONFLICT_DIR))
    parent = venv_of(CLASSIC)
    before = contents(parent)
    async with open_app(settings("local")) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name="vf_conflict_pin")
        for tool, args in (("rl_test_inference", {"num_steps": 1, "group_size": 2}), ("rl_start_training", {})):
            started = time.monotonic()
            message = await refused(client, tool, **args)
            assert time.monotonic() - started < 60, tool
            assert "idna==3.6 (by vf-conflict-pin)" in message and f"pinned in {parent}" in message, message
            assert f"{parent} is unchanged" in message and "pyproject.toml" in message, message
        assert (await call(client, "rl_list_runs"))["runs"] == []
    assert_unchanged(parent, before)
    assert installed(rl_home) == [] and not list((rl_home / "env-venvs").glob("vf_conflict_pin*"))


@pytest.mark.slow
async def test_a_module_installed_nowhere_is_named_with_the_venv_and_the_command(
    rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(MISSING_DIR))
    monkeypatch.setenv("RL_MCP_STATUS_MIN_INTERVAL", "0")
    async with open_app(settings("local", stop_runs_on_exit=True)) as app, Client(build_server(app)) as client:
        # an Atropos file: imported (for its fields) in the product's venv
        message = await refused(client, "rl_select_environment", name="needs_nowhere")
        assert "module 'rl_mcp_test_nowhere_module' is not installed" in message, message
        assert f"{PRODUCT_VENV} (the training runtime)" in message, message
        assert f"{PRODUCT_VENV}/bin/pip install rl-mcp-test-nowhere-module" in message, message
        assert "No module named 'rl_mcp_test_nowhere_module'" in message  # the original, kept below
        # one that imports it only once it runs: the run's failure names it the same way
        await call(client, "rl_select_environment", name="late_import")
        for field, value in {"total_steps": 2, "batch_size": 4, "steps_per_eval": 100}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        status = await wait_for(client, run_id, ended, 180)
        assert status["status"] == "failed" and status["error"].startswith(
            "module 'rl_mcp_test_nowhere_module' is not installed"
        ), status["error"]
        assert f"{PRODUCT_VENV}/bin/pip install rl-mcp-test-nowhere-module" in status["error"], status["error"]
        assert "exited with code" in status["error"].split("The original error:")[1], status["error"]
        if not CLASSIC.python(os.environ).exists():
            return
        # a classic verifiers file: it loads in verifiers' venv, which lacks what the product's has
        await call(client, "rl_select_environment", name="vf_needs_reasoning_gym")
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=120)
        (model,) = tested["results"]
        classic = venv_of(CLASSIC)
        assert model["status"] == "failed" and f"{classic}/bin/pip install reasoning-gym" in model["error"], model
        assert "uv add" in model["error"].split("The original error:")[1], model["error"]
