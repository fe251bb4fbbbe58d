"""What a client lists of the server (tools, prompts, resources, resource templates and the server's
instructions), compared with tests/fixtures/mcp_surface.json, in both protocol generations: a moved
module or a reworded string that changes a name, schema, description or annotation fails here.

After an intended change, write the file again: RL_MCP_UPDATE_SURFACE=1 pytest tests/test_mcp_surface.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

pytestmark = pytest.mark.anyio
SNAPSHOT = Path(__file__).parent / "fixtures" / "mcp_surface.json"
MODES = ["auto", "legacy"]


def listed(items: list[Any]) -> list[dict[str, Any]]:
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]


async def surface(client: Client) -> dict[str, Any]:
    return {
        "instructions": client.instructions,
        "tools": listed((await client.list_tools()).tools),
        "prompts": listed((await client.list_prompts()).prompts),
        "resources": listed((await client.list_resources()).resources),
        "resource_templates": listed((await client.list_resource_templates()).resource_templates),
    }


@pytest.mark.parametrize("mode", MODES)
async def test_the_listed_surface_is_unchanged(mcp_app, mode: str) -> None:
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        found = await surface(client)
    text = json.dumps(found, indent=1, sort_keys=False) + "\n"
    if os.environ.get("RL_MCP_UPDATE_SURFACE") == "1" and mode == MODES[0]:
        SNAPSHOT.write_text(text)
    assert found == json.loads(SNAPSHOT.read_text())
