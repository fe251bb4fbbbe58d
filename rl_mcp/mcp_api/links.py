"""Resource links in the run tools' answers: the run's status, metrics and log resources, so a
client can open or subscribe to them without composing URIs."""

from __future__ import annotations

from mcp_types import CallToolResult, ResourceLink, TextContent
from pydantic import BaseModel

from tinker_atropos.run_files import ProcessName


def run_links(run_id: str) -> list[ResourceLink]:
    base = f"rl://runs/{run_id}"
    links = [
        ResourceLink(
            type="resource_link",
            uri=f"{base}/metrics",
            name="run-metrics",
            title=f"Metrics of {run_id}",
            description="Per-step metrics and evaluations (subscribable)",
            mime_type="application/json",
        )
    ]
    for process in ProcessName:
        links.append(
            ResourceLink(
                type="resource_link",
                uri=f"{base}/logs/{process.value}",
                name=f"run-log-{process.value}",
                title=f"{process.value} log of {run_id}",
                description=f"The last 200 lines of the {process.value} log (subscribable)",
                mime_type="text/plain",
            )
        )
    return links


def with_run_links(answer: BaseModel, run_id: str) -> CallToolResult:
    """The answer as structured content and JSON text, followed by the run's resource links."""
    return CallToolResult(
        content=[TextContent(type="text", text=answer.model_dump_json(indent=1)), *run_links(run_id)],
        structured_content=answer.model_dump(mode="json"),
    )
