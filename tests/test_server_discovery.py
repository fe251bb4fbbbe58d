"""Environment discovery by AST: what counts as an environment, errors, duplicates, no imports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rl_mcp.environments.discovery import Discovery, scan_file
from rl_mcp.settings import BUNDLED_ENV_DIR


def test_discovery_finds_direct_and_indirect_subclasses_without_importing(probe_env_dirs):
    first, second = probe_env_dirs
    catalog = Discovery((first, second)).scan()
    names = set(catalog.environments)
    assert {"probe", "child"} <= names
    assert "SharedBase" not in {e.class_name for e in catalog.environments.values()}  # a base, not an env
    assert "broken" in names  # found by AST even though importing it fails
    probe = catalog.environments["probe"]
    assert (probe.class_name, probe.config_class, probe.file) == ("ProbeEnv", "ProbeConfig", first / "probe.py")
    assert probe.description == "Probe: a small environment for rl-mcp's server tests."
    child = catalog.environments["child"]  # no `name` attribute: the file stem
    assert child.description == "Child through a shared base."
    assert not (first / "child.imported").exists(), "discovery must not import environment files"


def test_syntax_error_is_reported_not_fatal(probe_env_dirs):
    catalog = Discovery(probe_env_dirs).scan()
    (problem,) = [e for e in catalog.errors if e["file"].endswith("syntax_bad.py")]
    assert "SyntaxError" in problem["error"] and "line 2" in problem["error"]
    assert "probe" in catalog.environments


def test_duplicate_names_first_dir_wins_and_is_reported(probe_env_dirs):
    first, second = probe_env_dirs
    for order in ((first, second), (second, first)):
        catalog = Discovery(order).scan()
        winner = catalog.environments["probe"]
        assert winner.env_dir == order[0]
        (shadow,) = [s for s in catalog.shadowed if s["name"] == "probe"]
        assert shadow["file"].startswith(str(order[1]))
        assert shadow["shadowed_by"].startswith(str(winner.file))


def test_missing_env_dir_is_reported(tmp_path: Path):
    catalog = Discovery((tmp_path / "nope",)).scan()
    assert catalog.environments == {}
    assert catalog.errors == [{"file": str(tmp_path / "nope"), "error": "environment directory does not exist"}]


def test_rescan_sees_changed_files(tmp_path: Path):
    env = tmp_path / "e.py"
    env.write_text("from atroposlib.envs.base import BaseEnv\nclass A(BaseEnv):\n    name = 'one'\n")
    discovery = Discovery((tmp_path,))
    assert set(discovery.scan().environments) == {"one"}
    env.write_text("from atroposlib.envs.base import BaseEnv\nclass A(BaseEnv):\n    name = 'two_longer'\n")
    assert set(discovery.scan().environments) == {"two_longer"}


def test_bundled_environments_are_listed():
    catalog = Discovery((BUNDLED_ENV_DIR,)).scan()
    assert {"letter_repeat", "gsm8k_tinker"} <= set(catalog.environments)
    assert catalog.errors == []


def test_scan_file_reports_unreadable_bytes(tmp_path: Path):
    bad = tmp_path / "nul.py"
    bad.write_bytes(b"x = 1\0\n")
    assert scan_file(bad).error is not None


# --- introspection (a child process per environment file, cached by mtime) ---------------------

FAST_ENV = '''"""An environment whose config needs no atroposlib import (keeps this test fast)."""
import os, pathlib
from pydantic import BaseModel, Field

pathlib.Path(os.environ["IMPORT_LOG"]).open("a").write(f"{os.getpid()}\\n")
{extra}

class BaseEnv:  # stands in for the name only: discovery matches bases by name
    pass


class FastConfig(BaseModel):
    alpha: int = Field(1, ge=0, description="first")
{fields}

class FastEnv(BaseEnv):
    name = "fast"

    @classmethod
    def config_init(cls):
        return FastConfig(), []
'''


def _write_fast_env(path: Path, fields: str = "", extra: str = "") -> None:
    path.write_text(FAST_ENV.replace("{fields}", fields).replace("{extra}", extra))


async def _schema(tmp_path: Path, **settings_env):
    from rl_mcp.environments.introspection import Introspector
    from rl_mcp.settings import Settings

    settings = Settings.from_env({**os.environ, **settings_env}, profile="local")
    info = Discovery((tmp_path / "envs",)).scan().environments["fast"]
    return await Introspector(settings).schema(info)


@pytest.mark.anyio
async def test_introspection_is_cached_until_the_file_changes(tmp_path: Path, monkeypatch):
    env_file = tmp_path / "envs" / "fast.py"
    env_file.parent.mkdir()
    log = tmp_path / "imports.log"
    monkeypatch.setenv("IMPORT_LOG", str(log))
    _write_fast_env(env_file)
    first = await _schema(tmp_path)
    assert first.fields["alpha"].json_schema["minimum"] == 0
    assert first.fields["alpha"].description == "first" and first.fields["alpha"].default == 1
    assert first.config_class == "FastConfig"
    await _schema(tmp_path)  # a new Introspector: served from the disk cache
    assert len(log.read_text().split()) == 1
    _write_fast_env(env_file, fields="    beta: str = 'b'\n")
    os.utime(env_file, ns=(env_file.stat().st_atime_ns, env_file.stat().st_mtime_ns + 10**9))
    second = await _schema(tmp_path)
    assert "beta" in second.fields and len(log.read_text().split()) == 2


@pytest.mark.anyio
async def test_introspection_timeout_stops_the_child(tmp_path: Path, monkeypatch):
    import psutil

    from rl_mcp.environments.introspection import IntrospectionError

    env_file = tmp_path / "envs" / "fast.py"
    env_file.parent.mkdir()
    log = tmp_path / "imports.log"
    monkeypatch.setenv("IMPORT_LOG", str(log))
    _write_fast_env(env_file, extra="import time\ntime.sleep(120)\n")
    with pytest.raises(IntrospectionError, match="took longer than 1 s"):
        await _schema(tmp_path, RL_MCP_INTROSPECT_TIMEOUT="1")
    pid = int(log.read_text().split()[0])
    gone, alive = psutil.wait_procs([psutil.Process(pid)] if psutil.pid_exists(pid) else [], timeout=5)
    assert not alive, "the timed-out introspection child is still running"
