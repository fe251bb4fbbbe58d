"""The server's settings at their boundary: a profile file and the RL_MCP_* variables, validated by
their pydantic models, each problem refused naming where it is and the value given."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_mcp.settings import EnvLimits, Settings, SettingsError, load_profile

LOCAL = {"backend": "local", "model": "tiny-chat"}


def profile_file(tmp_path: Path, **fields: object) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(fields))
    return str(path)


def test_a_profile_is_read_with_its_sections_engine_and_price(tmp_path: Path) -> None:
    engine = {"kind": "skyrl", "backend_config": {"max_lora_adapters": 3}}
    path = profile_file(
        tmp_path, backend="tinker", model="tiny-chat", engine=engine, pricing={"usd_per_million_tokens": 2},
        locked={"trainer": {"lora_rank": 8}, "env": None}, requires_env=None,
    )  # fmt: skip
    profile = load_profile(path)
    assert (profile.name, profile.backend, profile.usd_per_million_tokens) == ("mine", "tinker", 2.0)
    assert profile.engine == {"kind": "skyrl", "url": None, "backend_config": {"max_lora_adapters": 3}}
    assert profile.locked == {"env": {}, "trainer": {"lora_rank": 8}} and profile.requires_env == ()
    attached = load_profile(profile_file(tmp_path, backend="tinker", model="m", engine={"url": "http://h:1"}))
    assert attached.engine is not None and attached.engine["kind"] == "attached"


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({**LOCAL, "lockd": {}}, "`lockd`: not a known key"),
        ({**LOCAL, "locked": {"train": {}}}, "`locked.train`: not a known key"),
        ({"backend": "gpu", "model": "m"}, "`backend`: Input should be 'tinker' or 'local', got 'gpu'"),
        ({"backend": "local"}, "`model`: Field required"),
        ({**LOCAL, "engine": {"kind": "skyrl"}}, "only on a profile with backend: tinker"),
        ({"backend": "tinker", "model": "m", "engine": {"kind": "other"}}, "`engine.kind`"),
        ({"backend": "tinker", "model": "m", "engine": {}}, "needs 'url' (an engine you run) or 'kind: skyrl'"),
        ({"backend": "tinker", "model": "m", "engine": {"url": "h:1"}}, "`engine.url`: String should match"),
        ({**LOCAL, "pricing": {"usd_per_million_tokens": -1}}, "`pricing.usd_per_million_tokens`"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_key_and_the_value(tmp_path: Path, fields: dict, refused: str) -> None:
    path = profile_file(tmp_path, **fields)
    with pytest.raises(SettingsError, match="profile .*mine.yaml: ") as err:
        load_profile(path)
    assert refused in str(err.value)


def test_a_profile_with_the_old_section_name_loads_with_a_deprecation_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = profile_file(tmp_path, backend="local", model="tiny-chat", defaults={"tinker": {"lora_rank": 8}})
    with caplog.at_level("WARNING", logger="rl_mcp"):
        profile = load_profile(path)
    assert profile.defaults["trainer"] == {"lora_rank": 8}
    assert "profile section 'tinker' is now 'trainer'" in caplog.text


def test_the_variables_are_read_once_with_their_defaults_and_bad_ones_refused(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    settings = Settings.from_env(
        {"RL_MCP_HOME": home, "RL_MCP_PROFILE": "local", "RL_MCP_ENV_DISCARD_GROUPS": "3", "RL_MCP_CACHE": ""}
    )
    assert settings.env_limits == EnvLimits(discard_groups=3) and settings.env_limits.error_timeout_s == 120.0
    assert settings.cache_dir == (tmp_path / "home" / "cache").resolve()  # empty is unset
    assert settings.status_min_interval_s == 1800.0 and settings.introspect_timeout_s == 60.0
    for name, value, refused in [
        ("RL_MCP_ENV_DISCARD_GROUPS", "0", "`RL_MCP_ENV_DISCARD_GROUPS`: Input should be greater than or equal to 1"),
        ("RL_MCP_INTROSPECT_TIMEOUT", "soon", "`RL_MCP_INTROSPECT_TIMEOUT`: Input should be a valid number"),
    ]:
        with pytest.raises(SettingsError, match="environment variables: ") as err:
            Settings.from_env({"RL_MCP_HOME": home, "RL_MCP_PROFILE": "local", name: value})
        assert refused in str(err.value) and repr(value) in str(err.value)
