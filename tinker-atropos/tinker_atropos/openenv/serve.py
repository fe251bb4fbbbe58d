"""Serve an OpenEnv environment folder for a run: this file runs on the environment's own venv
(openenv pinned there), never in the product's processes.

    python serve.py --folder DIR --app server.app:app --port P --sessions N --report FILE

The folder's app is imported as `uvicorn server.app:app` run in the folder would import it. Its
`create_app(..., max_concurrent_envs=1)` (the `openenv init` default) would refuse every rollout but
one: the sessions are raised to N where the environment declares SUPPORTS_CONCURRENT_SESSIONS, and
the report says how many it got. Only loopback is served.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

WEB_INTERFACE_MODULE = "openenv.core.env_server.web_interface"
WEB_INTERFACE_ON = ("true", "1", "yes")  # ENABLE_WEB_INTERFACE's values that turn it on, as OpenEnv reads them


def _supports_concurrency(env: Any) -> bool:
    factory = env.func if isinstance(env, functools.partial) else env
    return bool(inspect.isclass(factory) and getattr(factory, "SUPPORTS_CONCURRENT_SESSIONS", False))


def _with_sessions(create_app: Any, sessions: int, granted: dict[str, Any]) -> Any:
    """`create_app` with `max_concurrent_envs` raised to `sessions` where the environment allows it."""

    signature = inspect.signature(create_app)

    @functools.wraps(create_app)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        concurrent = _supports_concurrency(given["env"])
        if concurrent and given.get("concurrency_config") is not None:
            given["concurrency_config"] = given["concurrency_config"].model_copy(
                update={"max_concurrent_envs": sessions}
            )
        elif concurrent:
            given["max_concurrent_envs"] = max(sessions, given.get("max_concurrent_envs") or 1)
        granted.update(
            environment=getattr(given["env"], "__name__", type(given["env"]).__name__),
            concurrent=concurrent,
            sessions=sessions if concurrent else (given.get("max_concurrent_envs") or 1),
        )
        return create_app(*bound.args, **bound.kwargs)

    return wrapped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--report", required=True)
    a = ap.parse_args()
    folder = Path(a.folder).resolve()
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    if os.environ.get("ENABLE_WEB_INTERFACE", "false").lower() not in WEB_INTERFACE_ON:
        # OpenEnv's web UI for people (gradio: 3.5 of the package's 4.9 CPU s of imports); a server
        # for training never shows it, and the package imports it only if it can (None: it cannot)
        sys.modules.setdefault(WEB_INTERFACE_MODULE, None)  # type: ignore[arg-type]
    import uvicorn
    from openenv.core import env_server
    from openenv.core.env_server import http_server

    granted: dict[str, Any] = {}
    patched = _with_sessions(http_server.create_app, a.sessions, granted)
    http_server.create_app = patched
    env_server.create_app = patched
    module_name, _, attribute = a.app.partition(":")
    app = getattr(importlib.import_module(module_name), attribute or "app")
    Path(a.report).write_text(json.dumps(granted))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", ws_max_size=16 * 1024 * 1024)


if __name__ == "__main__":
    main()
