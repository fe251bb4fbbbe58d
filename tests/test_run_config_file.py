"""A run's config.yaml read back: parsed once per version of the file, each caller its own copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from rl_mcp.runs.config_file import read_run_config
from tinker_atropos.run_files import atomic_write_text


def test_each_reader_gets_its_own_copy_and_a_rewrite_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    atomic_write_text(path, yaml.safe_dump({"trainer": {"total_steps": 5}, "env": {"group_size": 4}}))
    first = read_run_config(path)
    first["trainer"]["total_steps"] = 99  # a caller's edit stays its own
    assert read_run_config(path) == {"trainer": {"total_steps": 5}, "env": {"group_size": 4}}
    atomic_write_text(path, yaml.safe_dump({"trainer": {"total_steps": 6}, "env": {"group_size": 4}}))  # same size
    assert read_run_config(path)["trainer"]["total_steps"] == 6
    path.write_text("trainer: {total_steps: 7}\n")  # rewritten in place, same inode
    os.utime(path, ns=(1, 1))
    assert read_run_config(path) == {"trainer": {"total_steps": 7}}


def test_a_config_written_before_the_trainer_section_was_renamed_reads_as_today(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("env: {group_size: 4}\ntinker: {total_steps: 5, backend: local}\n")
    assert read_run_config(path) == {"env": {"group_size": 4}, "trainer": {"total_steps": 5, "backend": "local"}}


def test_a_file_without_a_mapping_reads_empty_and_bad_files_raise(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "bad.yaml").write_text("tinker: [1\n")
    assert read_run_config(tmp_path / "empty.yaml") == {}
    assert read_run_config(tmp_path / "list.yaml") == {}
    with pytest.raises(yaml.YAMLError):
        read_run_config(tmp_path / "bad.yaml")
    with pytest.raises(OSError):
        read_run_config(tmp_path / "missing.yaml")
