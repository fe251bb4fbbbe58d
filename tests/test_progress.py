"""Progress notifications rise within every call: the MCP spec wants each `progress` larger than the one
before, even when the total is unknown, while a long tool reports from places that each count from
zero (pip lines, an engine restart, scored groups, export fractions, a start's stages).

`CallProgress` on its own here; `ProgressLog` and `call_with_progress` are what the tests of each long
tool pass a real MCP client, asserting the same of what the server sent: test_env_packages
(rl_select_environment installing a folder, rl_test_inference after an install), test_runs_mcp
(rl_start_training with wait), test_sft_preview (rl_preview_sft), test_export (rl_export_model),
test_inference_tool and test_server_tools (scored groups, a selection's introspection).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import anyio
import pytest
from mcp import Client

from rl_mcp.mcp_api.progress import CallProgress

pytestmark = pytest.mark.anyio


class ProgressLog:
    """A client's progress callback for one call: what the server sent, and the spec's rules on it."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, value: float, total: float | None, message: str | None) -> None:
        self.seen.append((value, total, message))

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]

    def assert_rising(self) -> None:
        """Each value larger than the one before, each with a message, none above its total."""
        values = [v for v, _, _ in self.seen]
        assert all(a < b for a, b in pairwise(values)), self.seen
        assert all(self.messages), self.seen
        assert all(t is None or v <= t for v, t, _ in self.seen), self.seen


async def call_with_progress(client: Client, tool: str, **args: Any) -> tuple[dict[str, Any], ProgressLog]:
    """`tool`'s answer (an error fails the test) and its progress, checked by the spec's rules."""
    log = ProgressLog()
    result = await client.call_tool(tool, args, progress_callback=log)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    log.assert_rising()
    return result.structured_content or {}, log


async def test_notes_and_phases_share_one_rising_scale() -> None:
    log = ProgressLog()
    progress = CallProgress(log)
    await progress.note("pip: Collecting inflection")
    await progress.note("pip: Successfully installed inflection-0.5.1")
    loading = progress.phase()  # a phase is laid after what was sent before its first report
    await loading(0, 1, "loading the config fields")
    await loading(1, 1, "loaded 12 config fields")
    await progress.note("starting SkyRL's Tinker engine")
    assert log.seen == [
        (1.0, None, "pip: Collecting inflection"),
        (2.0, None, "pip: Successfully installed inflection-0.5.1"),
        (2.001, 3.0, "loading the config fields"),
        (3.0, 3.0, "loaded 12 config fields"),
        (4.0, None, "starting SkyRL's Tinker engine"),
    ]


async def test_a_phase_alone_keeps_its_own_values() -> None:
    log = ProgressLog()
    groups = CallProgress(log).phase()
    for done in (1, 2):
        await groups(done, 2, f"group {done}/2 scored")
    assert [(v, t) for v, t, _ in log.seen] == [(1.0, 2.0), (2.0, 2.0)]


async def test_a_report_that_would_not_rise_is_nudged_within_its_phase_or_dropped_at_its_end() -> None:
    log = ProgressLog()
    progress = CallProgress(log)
    await progress.note("starting SkyRL's Tinker engine")
    export = progress.phase()
    fractions = [("downloading", 0.0), ("downloading", 0.0), ("downloading", 0.3), ("loading the base model", 0.3)]
    for stage, fraction in [*fractions, ("done", 1.0), ("done", 1.0)]:
        await export(fraction, 1.0, stage)
    log.assert_rising()
    assert log.messages == ["starting SkyRL's Tinker engine", *(s for s, _ in fractions), "done"]
    assert log.seen[-1][:2] == (2.0, 2.0) and log.seen[1][0] == pytest.approx(1.001)


async def test_reports_from_parallel_tasks_leave_in_the_order_their_values_were_made() -> None:
    log = ProgressLog()

    async def slow_send(value: float, total: float | None, message: str | None) -> None:
        await anyio.sleep(0.01 if value < 2 else 0)  # the first send is still out when the next comes
        await log(value, total, message)

    groups = CallProgress(slow_send).phase()
    async with anyio.create_task_group() as tg:
        for done in (1, 2, 3):
            tg.start_soon(groups, done, 3, f"group {done}")
            await anyio.sleep(0)
    log.assert_rising()
    assert len(log.seen) == 3
