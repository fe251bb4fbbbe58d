"""The example environment: its scoring, and rl-mcp finding, introspecting and testing it
via RL_MCP_ENV_DIRS.

Run with `python -m pytest examples/custom_env -q` (tests/test_examples.py runs it in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import Client
from word_shout import EVAL_WORDS, WORDS, shout_prompt, shout_score

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("APPLE", 1.0),
        ("  APPLE.", 1.0),
        ("APPLE is the answer", 1.0),
        ("apple", 0.5),
        ("Apple!", 0.5),
        ("APPLES", 0.0),
        ("PEAR", 0.0),
        ("", 0.0),
        ("12 !?", 0.0),
        ("The word: APPLE", 0.0),
    ],
)
def test_shout_score(completion: str, expected: float) -> None:
    assert shout_score("apple", completion) == expected


def test_prompt_names_the_word_and_eval_words_are_held_out() -> None:
    assert "river" in shout_prompt("river")[-1]["content"]
    assert not set(EVAL_WORDS) & set(WORDS)
    assert all(w.isalpha() and w.islower() for w in WORDS + EVAL_WORDS)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_rl_mcp_discovers_and_introspects_it(tmp_path: Path) -> None:
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    environ = {
        **os.environ,
        "RL_MCP_HOME": str(tmp_path / "home"),
        "RL_MCP_ENV_DIRS": str(HERE),
        "RL_MCP_PROFILE": "local",
        "HF_HUB_OFFLINE": "1",
    }
    async with open_app(Settings.from_env(environ)) as app:
        async with Client(build_server(app)) as client:
            listing = await client.call_tool("rl_list_environments", {})
            found = {e["name"]: e for e in listing.structured_content["environments"]}
            assert found["word_shout"]["class_name"] == "WordShoutEnv"
            assert found["word_shout"]["config_class"] == "WordShoutConfig"
            assert found["word_shout"]["bundled"] is False
            assert Path(found["word_shout"]["file"]) == HERE / "word_shout.py"

            selected = await client.call_tool("rl_select_environment", {"name": "word_shout"})
            assert not selected.is_error, selected.content
            fields = {f["name"]: f for f in selected.structured_content["config"]["fields"]}
            assert fields["max_completion_tokens"]["default"] == 8
            assert fields["max_completion_tokens"]["constraints"].get("maximum") == 256
            assert fields["temperature"]["editable"] is True

            refused = await client.call_tool("rl_edit_config", {"field": "max_completion_tokens", "value": 1000})
            assert refused.is_error
            edited = await client.call_tool("rl_edit_config", {"field": "seed", "value": 7})
            assert not edited.is_error, edited.content
            assert edited.structured_content["edits"] == {"seed": 7}

            # Real rollouts: atroposlib's `process` mode against the local inference server.
            tested = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 4})
            assert not tested.is_error, tested.content
            (result,) = tested.structured_content["results"]
            assert result["status"] == "ok", result.get("log_tail")
            assert result["completions"] == 4 and result["real_logprobs"] is True
            assert "capital letters" in result["samples"][0]["prompt"]
            assert all(0.0 <= s <= 1.0 for s in result["step_scores"][0])
