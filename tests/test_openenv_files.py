"""What an OpenEnv folder, a servers file and an items file may hold, each refusal naming the file,
the line and the fix; what the model reads of an observation, and a typed action as a tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_mcp.formats.openenv.entries import url_entries
from tinker_atropos.openenv.folder import OpenEnvFolderError, read_openenv_folder, refuse_remote_source
from tinker_atropos.openenv.items import ItemsError, read_items


def folder(tmp_path: Path, manifest: str, app_file: bool = True) -> Path:
    (tmp_path / "openenv.yaml").write_text(manifest)
    if app_file:
        (tmp_path / "server").mkdir(exist_ok=True)
        (tmp_path / "server" / "app.py").write_text("app = None\n")
    return tmp_path


def test_a_folder_names_its_app_and_runtime_or_is_refused_with_the_fix(tmp_path: Path) -> None:
    found = read_openenv_folder(folder(tmp_path, "name: echo\napp: server.app:app\n"))
    assert (found.name, found.app, found.app_file) == ("echo", "server.app:app", tmp_path / "server" / "app.py")
    for manifest, said in (
        ("name: echo\n", "names no app to serve"),
        ("app: server.app:app\nruntime: docker\n", "runtime 'docker' cannot be served here"),
        ("app: [oops\n", "is not valid YAML"),
        ("app: server.main:app\n", "which does not exist"),
    ):
        with pytest.raises(OpenEnvFolderError, match=said):
            read_openenv_folder(folder(tmp_path, manifest))
    with pytest.raises(OpenEnvFolderError, match="cannot be read"):
        read_openenv_folder(tmp_path / "nowhere")


def test_hub_and_docker_sources_are_refused_with_what_to_do_instead(tmp_path: Path) -> None:
    for source in ("https://huggingface.co/spaces/openenv/echo_env", "https://openenv-echo.hf.space", "docker:echo:1"):
        said = refuse_remote_source(source)
        assert said is not None and "clone the Space's repository into a folder" in said and "its URL" in said
    assert refuse_remote_source("http://127.0.0.1:8000") is None
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"servers": {"hub": {"hub": "openenv/echo"}, "bare": {}, "ok": {"url": "http://h:1"}}}))
    entries = {e.name: e for e in url_entries(path)}
    assert "Hugging Face Hub" in (entries["openenv:hub"].error or "") and "needs a `url`" in (
        entries["openenv:bare"].error or ""
    )
    assert entries["openenv:ok"].error is None and entries["openenv:ok"].url == "http://h:1"
    path.write_text("[]")
    with pytest.raises(ValueError, match="is not an OpenEnv servers file"):
        url_entries(path)


def test_items_are_reset_arguments_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"reset": {"word": "live"}, "split": "eval"}\n\n{"prompt": "Go.", "id": "x"}\n')
    first, second = read_items(path)
    assert (first.reset, first.split, first.id) == ({"word": "live"}, "eval", "line 1")
    assert (second.reset, second.prompt, second.id) == ({}, "Go.", "x")
    for line, said in (
        ("not json", "line 2: not JSON"),
        ('{"reset": [1]}', "line 2: `reset` must be an object"),
        ('{"reset": {}, "split": "test"}', "line 2: split 'test' is neither"),
        ('{"rest": {}}', r"line 2: unknown field\(s\) \['rest'\]"),
    ):
        path.write_text('{"reset": {}}\n' + line + "\n")
        with pytest.raises(ItemsError, match=said):
            read_items(path)
    path.write_text("\n")
    with pytest.raises(ItemsError, match="holds no item"):
        read_items(path)
