"""verifiers environments ([verifiers] item 1): found, formatted and configured from their AST alone.

The files in tests/byo_envs/verifiers/ (classic environments, a v1 Taskset) are never imported here:
verifiers is not installed in this venv, and nothing here needs it. Through a real MCP client they
are listed with their format, selected, shown with their fields and edited; a start or an inference
test is refused at once where the environment's venv is missing (they run: test_verifiers_runs.py).
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult

from rl_mcp.environments.discovery import Discovery
from rl_mcp.formats.verifiers.files import read_file, read_module
from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.venvs import V1

VERIFIERS_DIR = Path(__file__).parent / "byo_envs" / "verifiers"
FAKE_KEY = "tml-sentinel-never-echoed"


def _read(source: str) -> Any:
    return read_module(ast.parse(source))


def fields_by_name(config: dict) -> dict[str, dict]:
    return {f["name"]: f for f in config["fields"]}


# --- which files are verifiers environments, and which format ---------------------------------


def test_load_environment_without_a_verifiers_import_is_not_claimed(tmp_path: Path) -> None:
    plain = "def load_environment(num_examples: int = 5):\n    return None\n"
    assert _read(plain) is None
    assert _read("import verifiers as vf\n\nclass Env:\n    def load_environment(self):\n        pass\n") is None
    assert _read("import verifiers as vf\n\nX = vf.SingleTurnEnv\n") is None  # no entry point
    (tmp_path / "plain.py").write_text(plain)
    assert Discovery((tmp_path,)).scan().environments == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import verifiers as vf\ndef load_environment(**kwargs): ...\n", "verifiers"),
        ("from verifiers import SingleTurnEnv\ndef load_environment(**kwargs): ...\n", "verifiers"),
        ("def load_environment(**kwargs):\n    import verifiers as vf\n", "verifiers"),  # a lazy import
        ("import verifiers.v1 as vf\ndef load_environment(**kwargs): ...\n", "verifiers-v1"),
        ("from verifiers.v1 import Taskset\ndef load_environment(config): ...\n", "verifiers-v1"),
        ("from verifiers import v1\ndef load_environment(config): ...\n", "verifiers-v1"),
        ("import verifiers as vf\ndef load_environment(config: vf.EnvConfig): ...\n", "verifiers-v1"),
        ("import verifiers as vf\nclass T(vf.Taskset): ...\ndef load_environment(**kw): ...\n", "verifiers-v1"),
    ],
)
def test_the_format_follows_the_imports_and_the_entry_points_signature(source: str, expected: str) -> None:
    assert _read(source).format == expected


def test_the_env_dirs_list_verifiers_files_beside_atropos_and_hermes_ones() -> None:
    catalog = Discovery((BUNDLED_ENV_DIR, VERIFIERS_DIR)).scan()
    formats = {name: info.format for name, info in catalog.environments.items()}
    assert formats["word_count"] == "verifiers" and formats["echo_taskset"] == "verifiers-v1"
    assert formats["letter_repeat"] == "atropos" and formats["tool_calculator"] == "hermes"
    classic = catalog.environments["word_count"]
    assert (classic.class_name, classic.config_class) == ("load_environment", "load_environment")
    assert classic.description == "A single-turn word-counting task scored by exact match."
    assert catalog.environments["echo_taskset"].config_class == "EchoEnvConfig"
    assert catalog.errors == [] and "verifiers" not in sys.modules


def test_discovery_and_fields_never_import_the_file(tmp_path: Path) -> None:
    (tmp_path / "side_effect.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('x')\n"
        "import verifiers as vf\n\ndef load_environment(n: int = 1):\n    return vf.SingleTurnEnv()\n"
    )
    info = Discovery((tmp_path,)).scan().environments["side_effect"]
    assert info.format == "verifiers" and read_file(info.file).fields["n"]["default"] == 1
    assert not (tmp_path / "side_effect.imported").exists()


# --- their config fields, from the AST --------------------------------------------------------


def test_classic_fields_are_load_environments_parameters() -> None:
    found = read_file(VERIFIERS_DIR / "word_count.py")
    assert list(found.fields) == ["num_examples", "difficulty", "system_prompt", "shuffle_seed"]  # not **kwargs
    num, difficulty = found.fields["num_examples"], found.fields["difficulty"]
    assert (num["type"], num["default"], num["json_schema"]) == ("int", 50, {"type": "integer"})
    assert num["description"] == "How many sentences the dataset holds."  # from the docstring's Args
    assert (difficulty["type"], difficulty["default"]) == ("str", "easy")
    prompt = found.fields["system_prompt"]  # a module constant assigned a literal
    assert prompt["default"] == "Answer with a single number: how many words the sentence has."
    seed = found.fields["shuffle_seed"]  # keyword-only, optional
    assert seed["default"] is None and seed["json_schema"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}


def test_defaults_the_ast_cannot_read_are_named_not_guessed() -> None:
    found = _read(
        "from typing import Literal, Optional\nimport verifiers as vf\n"
        "def load_environment(dataset, rubric=vf.Rubric(), mode: Literal['a', 'b'] = 'a',\n"
        "                     k: Optional[float] = None, tags: list[str] = ('x',), n=3):\n"
        "    '''Build it.\n\n    :param dataset: which dataset\n    '''\n"
    )
    fields = found.fields
    assert fields["dataset"]["default"] is None and "required" in fields["dataset"]["description"]
    assert fields["dataset"]["description"].startswith("which dataset")  # Sphinx style
    assert fields["rubric"]["default"] is None and "`vf.Rubric()`" in fields["rubric"]["description"]
    assert fields["mode"]["json_schema"] == {"enum": ["a", "b"]}
    assert fields["k"]["json_schema"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}
    assert fields["tags"]["default"] == ["x"] and fields["tags"]["json_schema"]["items"] == {"type": "string"}
    assert (fields["n"]["type"], fields["n"]["json_schema"]) == ("int", {"type": "integer"})  # from 3
    assert (fields["rubric"]["type"], fields["rubric"]["json_schema"]) == ("any", {})


def test_v1_fields_are_the_env_configs() -> None:
    found = read_file(VERIFIERS_DIR / "echo_taskset.py")
    assert (found.format, found.config_class) == ("verifiers-v1", "EchoEnvConfig")
    tasks = found.fields["num_tasks"]  # pydantic's Field: default, bounds, description
    assert (tasks["default"], tasks["description"]) == (20, "Tasks in the train split")
    assert tasks["json_schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert found.fields["case_sensitive"]["default"] is False
    taskset = found.fields["taskset"]  # a config class of the file: an object of its fields
    assert (taskset["type"], taskset["default"]) == ("EchoTasksetConfig", {"repeats": 2, "style": "plain"})
    assert taskset["json_schema"]["properties"]["style"] == {"enum": ["plain", "shout"]}
    bare = _read("from verifiers.v1 import Env, EnvConfig\ndef load_environment(config: EnvConfig): ...\n")
    assert (bare.config_class, bare.fields) == ("EnvConfig", {})  # verifiers' own class: nothing to read here


def test_a_recursive_config_class_is_read_without_recursing() -> None:
    found = _read(
        "import verifiers as vf\n\nclass Node(vf.TasksetConfig):\n    children: list['Node'] = []\n"
        "    parent: 'Node | None' = None\n\nclass Cfg(vf.EnvConfig):\n    root: Node = Node()\n\n"
        "def load_environment(config: Cfg): ...\n"
    )
    root = found.fields["root"]
    assert root["default"] == {"children": [], "parent": None}
    children = root["json_schema"]["properties"]["children"]
    assert children == {"type": "array", "items": {"type": "object"}}


def test_an_argument_named_as_a_product_field_is_the_environments_and_says_so(tmp_path: Path) -> None:
    from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo, FieldSpec, IntrospectionError
    from rl_mcp.formats import FORMATS
    from rl_mcp.formats.base import FieldPlaces

    def verifiers_schema(info: EnvironmentInfo, product: ConfigSchema) -> ConfigSchema:
        return FORMATS[info.format].schema(info, product, FieldPlaces(tmp_path, {}, lambda folder: None))

    env = tmp_path / "seeded.py"
    env.write_text("import verifiers as vf\n\ndef load_environment(seed: int = 7, n: int = 2):\n    ...\n")
    info = Discovery((tmp_path,)).scan().environments["seeded"]
    product = ConfigSchema(
        environment="",
        config_class="BaseEnvConfig",
        fields={
            "seed": FieldSpec("seed", "trainer", "int", 0, None, {"type": "integer"}),
            "total_steps": FieldSpec("total_steps", "env", "int", 1000, None, {"type": "integer", "minimum": 1}),
        },
    )
    schema = verifiers_schema(info, product)
    assert list(schema.fields) == ["seed", "n", "total_steps"]
    assert (schema.fields["seed"].section, schema.fields["seed"].default) == ("verifiers", 7)
    assert "hides the trainer field 'seed'" in (schema.fields["seed"].description or "")
    assert schema.fields["total_steps"] is product.fields["total_steps"]
    env.write_text("def load_environment(seed: int = 7):\n    ...\n")  # no longer a verifiers file
    with pytest.raises(IntrospectionError, match="no longer defines the verifiers environment 'seeded'"):
        verifiers_schema(info, product)


# --- through the MCP tools --------------------------------------------------------------------


@pytest.fixture
def verifiers_envs(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(VERIFIERS_DIR))
    return VERIFIERS_DIR


@pytest.fixture
def no_v1_venv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A verifiers-v1 venv that was never made: its environments are refused at once."""
    missing = tmp_path / "no-v1-venv"
    monkeypatch.setenv(V1.venv_var, str(missing))
    return missing


async def _ok(client: Client, tool: str, args: dict | None = None) -> dict:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def _err(client: Client, tool: str, args: dict | None = None) -> str:
    result = await client.call_tool(tool, args or {})
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_list_select_configure_and_refuse_through_mcp(mcp_app, verifiers_envs: Path, no_v1_venv: Path) -> None:
    async with mcp_app() as (_, server), Client(server) as client:
        listing = await _ok(client, "rl_list_environments")
        formats = {e["name"]: e["format"] for e in listing["environments"]}
        assert formats["word_count"] == "verifiers" and formats["echo_taskset"] == "verifiers-v1"
        assert formats["letter_repeat"] == "atropos"

        prompt = await client.get_prompt("rl_workflow", {"environment": "word_count"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert "verifiers environment, run from its own code" in text and "section `verifiers`" in text
        selected = await _ok(client, "rl_select_environment", {"name": "word_count"})
        config = selected["config"]
        assert (config["format"], config["config_class"]) == ("verifiers", "load_environment")
        fields = fields_by_name(config)
        num = fields["num_examples"]
        assert (num["section"], num["type"], num["default"], num["value"]) == ("verifiers", "int", 50, 50)
        assert num["editable"] and num["status"] == "default"
        assert (fields["difficulty"]["type"], fields["difficulty"]["value"]) == ("str", "easy")
        for name in ("total_steps", "group_size", "batch_size", "max_token_length"):  # every run's fields
            assert fields[name]["section"] == "env", name
        for name in ("learning_rate", "lora_rank"):
            assert fields[name]["section"] == "trainer", name
        assert fields["group_size"]["value"] == 8 and fields["group_size"]["status"] == "profile_default"

        edit = await _ok(client, "rl_edit_config", {"field": "num_examples", "value": 10})
        assert (edit["previous"], edit["value"]) == (50, 10)
        assert "expected integer" in await _err(client, "rl_edit_config", {"field": "num_examples", "value": "ten"})
        await _ok(client, "rl_edit_config", {"field": "total_steps", "value": 5})
        current = fields_by_name(await _ok(client, "rl_get_current_config"))
        assert (current["num_examples"]["value"], current["num_examples"]["status"]) == (10, "edited")
        assert current["total_steps"]["value"] == 5

        v1 = await _ok(client, "rl_select_environment", {"name": "echo_taskset"})
        v1_fields = fields_by_name(v1["config"])
        assert v1["config"]["format"] == "verifiers-v1" and v1["config"]["config_class"] == "EchoEnvConfig"
        assert v1_fields["num_tasks"]["constraints"] == {"minimum": 1, "maximum": 1000}
        assert "expected integer >= 1" in await _err(client, "rl_edit_config", {"field": "num_tasks", "value": 0})
        taskset = await _ok(client, "rl_edit_config", {"field": "taskset", "value": {"repeats": 3, "style": "shout"}})
        assert taskset["value"] == {"repeats": 3, "style": "shout"}
        for tool, args in (("rl_start_training", {}), ("rl_test_inference", {"num_steps": 1, "group_size": 2})):
            started = time.monotonic()
            message = await _err(client, tool, args)
            assert time.monotonic() - started < 10, tool  # refused up front: no child process
            assert "'echo_taskset' cannot run" in message and "mcp-server-rl setup verifiers-v1" in message, message


@pytest.mark.anyio
async def test_a_paid_profile_refuses_before_asking_to_spend(
    mcp_app, verifiers_envs: Path, no_v1_venv: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async with mcp_app(profile="tinker") as (_, server), Client(server, elicitation_callback=on_elicit) as client:
        await _ok(client, "rl_select_environment", {"name": "echo_taskset"})
        message = await _err(client, "rl_start_training")
    assert "mcp-server-rl setup verifiers-v1" in message and asked == [] and FAKE_KEY not in message
