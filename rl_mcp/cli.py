"""`mcp-server-rl serve | doctor | demo | export | serve-model | compare`: the command line.

stdout belongs to the MCP protocol on stdio, so every log line goes to stderr or `--log-file`.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from rl_mcp.distribution import COMMAND
from rl_mcp.http_bound import DEFAULT_MAX_REQUESTS, DEFAULT_MAX_STREAMS, HttpBound
from rl_mcp.interrupts import EXIT_SIGNALS
from rl_mcp.logs import LOG_FORMAT

if TYPE_CHECKING:  # imported where used: `mcp-server-rl doctor` and `demo` start without the SDK
    from mcp.server.mcpserver import MCPServer

    from rl_mcp.app import AppContext
    from rl_mcp.settings import Settings

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
log = logging.getLogger("rl_mcp")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=COMMAND, description="MCP server for RL training on Atropos environments.")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the MCP server (default)")
    serve.add_argument(
        "--transport",
        choices=("stdio", "sse", "http"),
        default="stdio",
        help="stdio (default; what clients launch), http (Streamable HTTP on /mcp: the way to serve over the "
        "network), sse (HTTP+SSE on /sse: deprecated by MCP 2026-07-28, kept for old clients; use http)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address for sse/http (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port for sse/http (0 picks a free one)")
    serve.add_argument(
        "--profile", help="operator profile: tinker, smollm2, local, or a YAML file (env RL_MCP_PROFILE)"
    )
    serve.add_argument("--auth-token", help="bearer token required on sse/http (env RL_MCP_AUTH_TOKEN)")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="extra Host header value accepted on sse/http, e.g. myhost:8000 (repeatable)",
    )
    serve.add_argument(
        "--max-requests",
        type=int,
        default=DEFAULT_MAX_REQUESTS,
        help=f"sse/http: requests in flight at once past which one is refused with 503 and Retry-After "
        f"(default {DEFAULT_MAX_REQUESTS})",
    )
    serve.add_argument(
        "--max-streams",
        type=int,
        default=DEFAULT_MAX_STREAMS,
        help=f"sse/http: open event streams (GET /sse, GET /mcp) past which one is refused with 503 "
        f"(default {DEFAULT_MAX_STREAMS})",
    )
    serve.add_argument(
        "--stop-runs-on-exit", action="store_true", help="stop training runs and served models when the server exits"
    )
    serve.add_argument("--log-file", type=Path, help="write logs here instead of stderr")
    serve.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    sub.add_parser("doctor", help="show what is available: python, packages, keys (names only), profile")
    sub.add_parser("demo", help="the whole agent workflow on the local backend", add_help=False)
    from rl_mcp.export_cli import add_parser as add_export

    add_export(sub)
    from rl_mcp.serve_model_cli import add_parser as add_serve_model

    add_serve_model(sub)
    from rl_mcp.compare_cli import add_parser as add_compare

    add_compare(sub)
    from rl_mcp.setup_cli import add_parser as add_setup

    add_setup(sub)
    from rl_mcp.examples_cli import add_parser as add_examples

    add_examples(sub)
    return parser


def configure_logging(log_file: Path | None, level: str) -> None:
    """Logs to stderr or a file, never stdout (stdout carries the stdio protocol)."""
    handler: logging.Handler
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["demo"]:
        from rl_mcp.demo import main as demo_main  # written by another module; imported only when asked for

        return int(demo_main(args_list[1:]) or 0)
    if not args_list or (args_list[0].startswith("-") and args_list[0] not in ("-h", "--help")):
        args_list = ["serve", *args_list]
    args = build_parser().parse_args(args_list)
    if args.command == "doctor":
        from rl_mcp.doctor import main as doctor_main

        return doctor_main()
    if args.command == "export":
        from rl_mcp.export_cli import run as export_run

        return export_run(args)
    if args.command == "serve-model":
        from rl_mcp.serve_model_cli import run as serve_model_run

        return serve_model_run(args)
    if args.command == "compare":
        from rl_mcp.compare_cli import run as compare_run

        return compare_run(args)
    if args.command == "setup":
        from rl_mcp.setup_cli import run as setup_run

        return setup_run(args)
    if args.command == "examples":
        from rl_mcp.examples_cli import run as examples_run

        return examples_run(args)
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    from rl_mcp.settings import Settings, SettingsError

    configure_logging(args.log_file, args.log_level)
    try:
        settings = Settings.from_env(
            profile=args.profile, auth_token=args.auth_token, stop_runs_on_exit=args.stop_runs_on_exit
        )
    except SettingsError as exc:
        print(f"rl-mcp: {exc}", file=sys.stderr)
        return 2
    if args.transport != "stdio" and not is_loopback(args.host) and not settings.auth_token:
        print(
            f"rl-mcp: binding {args.host} exposes the server beyond this machine: set --auth-token or "
            "RL_MCP_AUTH_TOKEN (clients send it as 'Authorization: Bearer <token>')",
            file=sys.stderr,
        )
        return 2
    if min(args.max_requests, args.max_streams) < 1:
        print(
            f"rl-mcp: --max-requests and --max-streams must be at least 1, got {args.max_requests} and "
            f"{args.max_streams}",
            file=sys.stderr,
        )
        return 2
    sock = None
    if args.transport != "stdio":  # bound here, outside the task groups, so a taken port is one clear line
        try:
            sock = _bind(args.host, args.port)
        except OSError as exc:
            print(f"rl-mcp: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
    from rl_mcp.statelock import StateDirLocked

    try:
        anyio.run(_serve, settings, args, sock)
    except KeyboardInterrupt:
        pass
    except StateDirLocked as exc:  # one server per state dir: this one exits, the holder goes on
        print(f"rl-mcp: {exc}", file=sys.stderr)
        return 3
    return 0


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def _serve(settings: Settings, args: argparse.Namespace, sock: socket.socket | None) -> None:
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server

    async with open_app(settings) as app, anyio.create_task_group() as tg:
        profile = settings.profile
        log.info("profile %s (%s backend), state dir %s", profile.name, profile.backend, settings.home)
        log.info("runs train %s: %s", profile.model, settings.profile_reason)
        if args.transport == "stdio":
            await tg.start(_close_and_exit_on_signal, app)
            log.info("serving stdio")
            await build_server(app).run_stdio_async()
            log.info("stdin closed: shutting down")
            await app.aclose()  # while signals are still handled: the client's SIGTERM follows in 2 s
        else:
            assert sock is not None
            port = sock.getsockname()[1]
            public_host = f"[{args.host}]" if ":" in args.host else args.host
            server = build_server(app, public_url=f"http://{public_host}:{port}")
            await _serve_http(server, sock, args, port, public_host, tg)
        tg.cancel_scope.cancel()


async def _close_and_exit_on_signal(app: AppContext, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    """stdio: the SDK reads stdin in a thread that cannot be cancelled, so on SIGTERM/SIGINT
    close the app here (honouring --stop-runs-on-exit; a close already under way, after stdin
    closed, is waited for) and exit without waiting for stdin. os._exit skips the blocks of the tool
    calls under way, so their children (rl_test_inference's, an export's) are stopped here too."""
    from rl_mcp.processes import stop_supervised

    with anyio.open_signal_receiver(*EXIT_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            with anyio.move_on_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(app.aclose)
                    tg.start_soon(stop_supervised)
            logging.shutdown()
            os._exit(0)


async def _serve_http(
    server: MCPServer,
    sock: socket.socket,
    args: argparse.Namespace,
    port: int,
    public_host: str,
    tg: anyio.abc.TaskGroup,
) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    class Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # signals are handled below: uvicorn would re-raise SIGTERM and skip our clean-up

    # DNS-rebinding protection: only these Host / Origin headers are accepted.
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *args.allowed_host]
    if not is_loopback(args.host):
        hosts.append(f"{public_host}:*")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in args.allowed_host],
    )
    if args.transport == "sse":
        log.warning("--transport sse is deprecated (MCP 2026-07-28): clients should use --transport http (/mcp)")
        starlette_app = server.sse_app(transport_security=security, host=args.host)
        path = "/sse"
    else:
        starlette_app = server.streamable_http_app(transport_security=security, host=args.host)
        path = "/mcp"
    # h11, not httptools (uvicorn's pick when installed): httptools keeps the trailing whitespace of a
    # header value, so an `Mcp-Name: tool ` that HTTP says equals `tool` (RFC 9110 5.5) was refused as a
    # mismatch with the body (MCP 2026-07-28 routing headers; the conformance suite's http-header-validation)
    bounded = HttpBound(starlette_app, max_requests=args.max_requests, max_streams=args.max_streams)
    config = uvicorn.Config(
        bounded, http="h11", log_config=None, log_level=args.log_level.lower(), lifespan="on", access_log=False
    )
    http_server = Uvicorn(config)

    async def stop_on_signal(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(*EXIT_SIGNALS) as signals:
            task_status.started()
            async for signum in signals:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                http_server.should_exit = True

    await tg.start(stop_on_signal)
    log.info("serving %s on http://%s:%d%s (%s)", args.transport, public_host, port, path, bounded.describe())
    await http_server.serve(sockets=[sock])
