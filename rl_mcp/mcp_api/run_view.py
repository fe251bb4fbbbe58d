"""The live run view, an MCP App (SEP-1865): one `ui://` HTML document, served by this server, that hosts
with apps (Claude Desktop, ChatGPT, VS Code, Goose) render inline for rl_start_training (from the
moment the run starts), rl_check_status and rl_compare_runs.

The page, its stylesheet and its script are package files assembled into one self-contained document:
a host renders it with no network. The tools name it in `_meta.ui.resourceUri`; hosts without apps
ignore that key, so their answers stay exactly as they were.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from mcp.server.apps import Apps

RUN_VIEW_URI = "ui://rl-mcp/run-view.html"
_ASSETS = files("rl_mcp.mcp_api") / "run_view_files"
# Where the page template takes its stylesheet and its script.
_STYLE_SLOT = "/* run_view.css */"
_SCRIPT_SLOT = "/* run_view.js */"


def run_view_meta() -> dict[str, Any]:
    """The `_meta` of a tool whose result the view renders."""
    return {"ui": {"resourceUri": RUN_VIEW_URI}}


def run_view_html() -> str:
    """The page with its stylesheet and script inlined."""
    page = (_ASSETS / "run_view.html").read_text(encoding="utf-8")
    if _STYLE_SLOT not in page or _SCRIPT_SLOT not in page:
        raise RuntimeError(f"run_view.html lost its {_STYLE_SLOT!r} or {_SCRIPT_SLOT!r} slot: the package is damaged")
    style = (_ASSETS / "run_view.css").read_text(encoding="utf-8")
    script = (_ASSETS / "run_view.js").read_text(encoding="utf-8")
    return page.replace(_STYLE_SLOT, style).replace(_SCRIPT_SLOT, script)


def run_view_extension() -> Apps:
    """The MCP Apps extension: advertises `io.modelcontextprotocol/ui` and serves the view."""
    apps = Apps()
    apps.add_html_resource(
        RUN_VIEW_URI,
        run_view_html(),
        name="run-view",
        title="Live run view",
        description="A training run's stage, ETA, findings and reward / eval / loss curves, updating while it "
        "trains, with a stop button; or several runs' curves side by side (rl_compare_runs).",
        prefers_border=True,
    )
    return apps
