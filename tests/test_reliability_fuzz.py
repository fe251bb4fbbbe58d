"""Fuzzing every tool's arguments over the in-memory client (>= 2,000 cases in all).

The server must never crash: each call answers a structured result, or isError with a message
that says what was wrong (a crash answers only `Error executing tool <name>` and logs a traceback;
both are caught here). A bad edit leaves the session as it was. Fuzzing never starts a training
run or an inference test: with no environment selected they fail their pre-flight, and once one
is selected their fuzzed arguments always carry one value that cannot validate.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

TOOLS = {
    "rl_list_environments": [],
    "rl_select_environment": ["name"],
    "rl_get_current_config": [],
    "rl_edit_config": ["field", "value", "reset"],
    "rl_test_inference": ["num_steps", "group_size", "models", "base_url", "api_key_env"],
    "rl_start_training": ["wait"],
    "rl_check_status": ["run_id"],
    "rl_stop_training": ["run_id"],
    "rl_get_results": ["run_id"],
    "rl_list_runs": ["status"],
    "rl_export_model": ["run_id", "format", "checkpoint", "dtype"],
    "rl_compare_runs": ["run_ids"],
}
REAL_ENVIRONMENTS = {"letter_repeat", "gsm8k_tinker"}
NASTY = [
    "", " ", "../../etc/passwd", "..", "/", "rl://runs/../../x", "a" * 5000, "\x00", "nul\x00byte",
    "ünïcødé ✓ 🚀", "'; DROP TABLE runs; --", "${HOME}", "%s%n", "\n\r\t", "-1", "1e309", "NaN",
    "letter_repeat/../gsm8k_tinker", "C:\\Windows", "http://127.0.0.1:1/v1", "null", "true",
]  # fmt: skip
# Strings pydantic's lax mode turns into a bool: `wait` must never get one while fuzzing.
BOOLISH = {"0", "1", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"}

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(NASTY)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
run_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", fullmatch=True)  # valid shape, unknown


def arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    """Known parameter names (more often) and stray ones, with any JSON values."""
    names = st.sampled_from(TOOLS[tool]) | st.text(max_size=12) if TOOLS[tool] else st.text(max_size=12)
    typed: dict[str, st.SearchStrategy[Any]] = {
        "run_id": run_ids | json_values,
        "run_ids": st.lists(run_ids, max_size=10) | json_values,
        "name": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True) | json_values,
        "field": st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True) | json_values,
    }
    base = st.dictionaries(names, json_values, max_size=4)
    biased = st.fixed_dictionaries({p: typed.get(p, json_values) for p in TOOLS[tool][:1]})
    return base | st.builds(lambda a, b: {**a, **b}, base, biased)


def never_valid_wait() -> st.SearchStrategy[Any]:
    """Values of `wait` that fail validation, so a fuzzed rl_start_training never starts a run."""
    return (
        st.integers().filter(lambda i: i not in (0, 1))
        | st.text(min_size=1, max_size=20).filter(lambda s: s.strip().lower() not in BOOLISH)
        | st.lists(json_values, max_size=3)
        | st.dictionaries(st.text(max_size=5), json_values, max_size=3)
        | st.floats(allow_nan=False).filter(lambda f: f not in (0.0, 1.0))
    )


def never_valid_inference_args() -> st.SearchStrategy[dict[str, Any]]:
    """rl_test_inference arguments with at least one out-of-range count: it can never start."""
    not_a_number = st.text(max_size=5).filter(lambda t: not any(c.isdigit() for c in t))
    bad_count = st.integers().filter(lambda i: i < 1 or i > 100) | not_a_number | st.lists(st.none())
    return st.builds(lambda a, bad: {**a, "num_steps": bad}, arguments("rl_test_inference"), bad_count)


class CrashLog(logging.Handler):
    """Collects the SDK's 'raised an unexpected exception' records (a crash inside a tool)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.crashes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "unexpected exception" in record.getMessage():
            self.crashes.append(f"{record.getMessage()}\n{record.exc_text or ''}")


@dataclass
class Served:
    portal: BlockingPortal
    app: Any
    client: Client
    crash_log: CrashLog
    cases: int = 0

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        self.cases += 1
        try:
            result = self.portal.call(lambda: self.client.call_tool(tool, args))
        except MCPError as exc:  # a protocol-level refusal is also an answer, if it says why
            assert exc.error.message.strip()
            return None
        check_answer(tool, result)
        assert not self.crash_log.crashes, self.crash_log.crashes[-1]
        return result


def check_answer(tool: str, result: Any) -> None:
    if result.is_error:
        text = "\n".join(c.text for c in result.content if c.type == "text")
        expected = rf"Error executing tool {re.escape(tool)}: \S" if tool in TOOLS else "Unknown tool: "
        assert re.match(expected, text, re.S), f"no message: {text!r}"
        assert "Traceback" not in text
    else:
        assert isinstance(result.structured_content, dict), result


@asynccontextmanager
async def _server(home: Path) -> AsyncIterator[tuple[Any, Client]]:
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    environ = {
        **os.environ,
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "OPENROUTER_API_KEY": "",
    }
    environ.pop("RL_MCP_ENV_DIRS", None)
    async with open_app(Settings.from_env(environ)) as app:
        async with Client(build_server(app)) as client:
            yield app, client


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    crash_log = CrashLog()
    logging.getLogger("mcp").addHandler(crash_log)
    home = tmp_path_factory.mktemp("fuzz-home")
    try:
        with start_blocking_portal() as portal:
            with portal.wrap_async_context_manager(_server(home)) as (app, client):
                yield Served(portal, app, client, crash_log)
                # Fuzzing started nothing, and the server still answers correctly.
                runs = portal.call(lambda: client.call_tool("rl_list_runs", {}))
                assert runs.structured_content["runs"] == []
                listing = portal.call(lambda: client.call_tool("rl_list_environments", {}))
                assert REAL_ENVIRONMENTS <= {e["name"] for e in listing.structured_content["environments"]}
    finally:
        logging.getLogger("mcp").removeHandler(crash_log)


FUZZ = settings(
    max_examples=220,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- nothing selected: every tool, any arguments -------------------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_fuzz_every_tool_with_nothing_selected(served: Served, tool: str) -> None:
    @FUZZ
    @given(args=arguments(tool))
    def fuzz(args: dict[str, Any]) -> None:
        if tool == "rl_select_environment" and isinstance(args.get("name"), str) and args["name"] in REAL_ENVIRONMENTS:
            args["name"] = f"{args['name']}_missing"
        served.call(tool, args)
        assert served.app.session.state.environment is None

    fuzz()


def test_fuzz_unknown_tools(served: Served) -> None:
    @settings(FUZZ, max_examples=40)
    @given(
        name=st.text(max_size=30).filter(lambda n: n not in TOOLS),
        args=st.dictionaries(st.text(max_size=5), json_values, max_size=2),
    )
    def fuzz(name: str, args: dict[str, Any]) -> None:
        served.call(name, args)

    fuzz()


# --- letter_repeat selected: edits, and the tools that would start work ---------------------------


@pytest.fixture(scope="module")
def selected(served: Served) -> Served:
    result = served.call("rl_select_environment", {"name": "letter_repeat"})
    assert not result.is_error, result.content
    return served


def test_fuzz_edits_validate_before_storing(selected: Served) -> None:
    view = selected.call("rl_get_current_config", {})
    fields = [f["name"] for f in view.structured_content["fields"]]

    @settings(FUZZ, max_examples=400)
    @given(
        field=st.sampled_from(fields) | st.text(max_size=20),
        value=json_values,
        reset=st.booleans() | json_values,
    )
    def fuzz(field: str, value: Any, reset: Any) -> None:
        before = dict(selected.app.session.state.edits)
        result = selected.call("rl_edit_config", {"field": field, "value": value, "reset": reset})
        if result is None or result.is_error:
            assert selected.app.session.state.edits == before, "a refused edit changed the session"
        else:
            assert result.structured_content["edits"] == selected.app.session.state.edits
        config = selected.call("rl_get_current_config", {})
        assert not config.is_error, config.content

    fuzz()
    selected.call("rl_edit_config", {"reset": True})
    assert selected.app.session.state.edits == {}


def test_fuzz_start_training_never_starts_with_invalid_arguments(selected: Served) -> None:
    @settings(FUZZ, max_examples=150)
    @given(wait=never_valid_wait(), extra=st.dictionaries(st.text(max_size=8), json_values, max_size=2))
    def fuzz(wait: Any, extra: dict[str, Any]) -> None:
        result = selected.call("rl_start_training", {**extra, "wait": wait})
        assert result is None or result.is_error

    fuzz()
    assert selected.app.runs.list() == []


def test_fuzz_test_inference_never_starts_with_invalid_arguments(selected: Served) -> None:
    @settings(FUZZ, max_examples=150)
    @given(args=never_valid_inference_args())
    def fuzz(args: dict[str, Any]) -> None:
        result = selected.call("rl_test_inference", args)
        assert result is None or result.is_error

    fuzz()


def test_fuzz_case_count(served: Served, request: pytest.FixtureRequest) -> None:
    """The suite above made at least 2,000 tool calls (runs last in this module)."""
    in_module = [item for item in request.session.items if item.path == request.path]
    if len(in_module) < len(TOOLS) + 5:
        pytest.skip("only part of the fuzz module was selected")
    assert served.cases >= 2000, served.cases
