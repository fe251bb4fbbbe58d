"""The run YAML loader: shipped configs load, and every kind of bad value names its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tinker_atropos.trainer.config import ConfigError, RunConfig, load_run_config

CONFIGS = Path(__file__).resolve().parents[1] / "tinker-atropos" / "configs"


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _valid() -> dict:
    return yaml.safe_load((CONFIGS / "local.yaml").read_text())


def test_shipped_configs_load() -> None:
    tinker_cfg = load_run_config(CONFIGS / "default.yaml")
    assert tinker_cfg.trainer.backend == "tinker"
    assert tinker_cfg.trainer.base_model == "Qwen/Qwen3-8B"
    assert tinker_cfg.trainer.lora_rank == 32
    assert tinker_cfg.trainer.learning_rate == 4e-5  # the same literal parsed: exactly equal
    assert (tinker_cfg.trainer.beta1, tinker_cfg.trainer.beta2) == (0.9, 0.95)
    local_cfg = load_run_config(CONFIGS / "local.yaml")
    assert local_cfg.trainer.backend == "local"
    assert local_cfg.trainer.base_model == "tiny-chat"
    assert isinstance(local_cfg.openai, list) and local_cfg.openai[0]["model_name"] == "tiny-chat"
    assert local_cfg.trainer.run_dir.is_absolute()


def test_ports_and_urls_come_from_the_file(tmp_path: Path) -> None:
    data = _valid()
    data["trainer"].update(api_url="http://127.0.0.1:45678", inference_port=45679)
    cfg = load_run_config(_write(tmp_path, data))
    assert isinstance(cfg, RunConfig)
    assert cfg.trainer.api_url == "http://127.0.0.1:45678"
    assert cfg.trainer.inference_port == 45679


def test_defaults_fill_optional_keys(tmp_path: Path) -> None:
    minimal = {
        "trainer": {"total_steps": 3, "api_url": "http://127.0.0.1:1", "inference_port": 2, "run_dir": str(tmp_path)}
    }
    cfg = load_run_config(_write(tmp_path, minimal))
    assert cfg.trainer.loss_fn == "importance_sampling"
    assert cfg.env.as_written() == {} and cfg.openai == [] and cfg.slurm is False


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("trainer", "lora_rank", "big", "integer > 0"),
        ("trainer", "lora_rank", 0, "integer > 0"),
        ("trainer", "learning_rate", "fast", "number > 0"),
        ("trainer", "beta2", 1.5, "number >= 0 and < 1"),
        ("trainer", "backend", "gpu", "one of 'local', 'tinker'"),
        ("trainer", "loss_fn", "dpo", "one of 'importance_sampling', 'ppo', 'cispo', 'dro', 'cross_entropy'"),
        ("trainer", "inference_port", 70000, "integer >= 1 and <= 65535"),
        ("trainer", "api_url", "127.0.0.1:8000", "string matching"),
        ("trainer", "use_wandb", [1], "boolean"),
        ("trainer", "wandb_group", 5, "string or null"),
    ],
)
def test_bad_value_names_key_and_type(tmp_path: Path, section: str, key: str, value: object, expected: str) -> None:
    data = _valid()
    data[section][key] = value
    with pytest.raises(ConfigError) as err:
        load_run_config(_write(tmp_path, data))
    assert err.value.key == f"{section}.{key}"
    assert expected in err.value.expected
    assert f"`{section}.{key}`" in str(err.value) and expected in str(err.value)


def test_missing_key_names_it(tmp_path: Path) -> None:
    data = _valid()
    del data["trainer"]["total_steps"]
    with pytest.raises(ConfigError, match=r"`trainer.total_steps` is missing: expected integer > 0") as err:
        load_run_config(_write(tmp_path, data))
    assert err.value.key == "trainer.total_steps"


def test_missing_section_names_it(tmp_path: Path) -> None:
    data = _valid()
    del data["trainer"]
    with pytest.raises(ConfigError, match=r"`trainer` is missing: expected mapping"):
        load_run_config(_write(tmp_path, data))


def test_unknown_key_is_rejected_with_the_known_ones(tmp_path: Path) -> None:
    data = _valid()
    data["trainer"]["lora_rnak"] = 8
    with pytest.raises(ConfigError, match=r"`trainer.lora_rnak` is not a known key .*lora_rank") as err:
        load_run_config(_write(tmp_path, data))
    assert err.value.key == "trainer.lora_rnak"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("openai", {"model_name": "x"}, "list of mapping"),
        ("env", [1, 2], "mapping (EnvSection)"),
        ("slurm", "yes please", "boolean or mapping"),
    ],
)
def test_bad_section_type(tmp_path: Path, key: str, value: object, expected: str) -> None:
    data = _valid()
    data[key] = value
    with pytest.raises(ConfigError) as err:
        load_run_config(_write(tmp_path, data))
    assert err.value.key == key and err.value.expected == expected


def test_bad_list_item_is_located(tmp_path: Path) -> None:
    data = _valid()
    data["openai"].append("not a server")
    with pytest.raises(ConfigError) as err:
        load_run_config(_write(tmp_path, data))
    assert err.value.key == "openai.1" and err.value.expected == "mapping"


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    data = _valid()
    data["trainer"].update(lora_rank=-1, device="tpu")
    with pytest.raises(ConfigError) as err:
        load_run_config(_write(tmp_path, data))
    assert "`trainer.lora_rank`" in str(err.value) and "`trainer.device`" in str(err.value)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_run_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(_write(tmp_path, "tinker: [unclosed"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_run_config(_write(tmp_path, "- just\n- a list\n"))


def test_a_config_written_with_the_old_section_name_loads_with_a_deprecation_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = _valid()
    data["tinker"] = data.pop("trainer")
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    with caplog.at_level("WARNING", logger="tinker_atropos.trainer.config"):
        cfg = load_run_config(path)
    assert cfg.trainer.base_model == "tiny-chat"
    assert f"{path}: section 'tinker' is now 'trainer'" in caplog.text
