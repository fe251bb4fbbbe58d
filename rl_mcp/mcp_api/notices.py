"""Each finding of a run, sent once as an MCP logging notification to the clients subscribed to it.

A finding (warning or error) is sent when it first fires for a run, as `notifications/message`
with logger `rl-mcp.diagnosis` and data {run_id, finding}, to every 2025-era session subscribed to
the run's resources (resources/subscribe) whose log level (logging/setLevel) admits it. It counts
as sent once a subscriber received it; the codes sent are kept in the run folder
(`findings_sent.json`), so a restarted server does not send them again. Logging is deprecated in
MCP 2026-07-28 and 2026-era clients get no standing log stream: they read the same findings in
rl_check_status / rl_get_results and in the run's resource `rl://runs/{id}`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from rl_mcp.diagnosis.answers import finding_view
from rl_mcp.diagnosis.findings import SEVERITY_RANK, Finding
from rl_mcp.diagnosis.inputs import run_facts
from rl_mcp.diagnosis.notified import record_sent, sent_codes
from rl_mcp.diagnosis.rules import diagnose
from rl_mcp.mcp_api.subscriptions import ResourcePublisher
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord

log = logging.getLogger(__name__)

LOGGER = "rl-mcp.diagnosis"
# Diagnose a subscribed run this often: findings come from steps (seconds apart) and from the
# time since the last step (a stall), so a few seconds late is on time.
CHECK_INTERVAL_S = 2.0
SEND_TIMEOUT_S = 2.0


class FindingNotices:
    def __init__(self, publisher: ResourcePublisher, cache: MetricsCache) -> None:
        self.publisher = publisher
        self.cache = cache

    async def run(self, supervised: Callable[[], list[RunRecord]], *, interval_s: float = CHECK_INTERVAL_S) -> None:
        """Forever: diagnose each supervised run that has subscribers, send its new findings. A run
        that ended since the last pass is diagnosed once more, on its final files: a finding of its
        last steps (within `interval_s` of its end) would otherwise never be sent."""
        watched: dict[str, RunRecord] = {}
        while True:
            now = {rec.run_id: rec for rec in supervised()}
            for rec in {**watched, **now}.values():
                await self.check(rec)
            watched = now
            await anyio.sleep(interval_s)

    async def check(self, rec: RunRecord) -> list[Finding]:
        """Send the run's findings not sent before; returns those that reached a subscriber."""
        sessions = self.publisher.run_sessions(rec.run_id)
        if not sessions:
            return []
        sent = sent_codes(rec.files.findings_sent)
        warn = SEVERITY_RANK["warning"]
        new = [f for f in diagnose(run_facts(rec, self.cache, time.time())) if f.rank >= warn and f.code not in sent]
        delivered = []
        for finding in new:
            wanting = [session for session in sessions if self.publisher.wants_log(session, finding.severity)]
            reached = [await self._send(session, rec.run_id, finding) for session in wanting]
            if any(reached):
                delivered.append(finding)
        if delivered:
            record_sent(rec.files.findings_sent, delivered)
        return delivered

    async def _send(self, session: Any, run_id: str, finding: Finding) -> bool:
        data = {"run_id": run_id, "finding": finding_view(finding).model_dump(mode="json")}
        try:
            with anyio.fail_after(SEND_TIMEOUT_S):
                await session.send_log_message(level=finding.severity, data=data, logger=LOGGER)
        except Exception as exc:  # a closed connection: forget the session
            log.debug("dropping a 2025-era subscriber (%s)", exc)
            self.publisher.forget_session(session)
            return False
        return True
