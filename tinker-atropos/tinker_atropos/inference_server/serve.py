"""Run the app with uvicorn on a socket we bind ourselves, so a taken port fails at once, clearly."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI


class PortBindError(OSError):
    """The inference server could not bind host:port (launch_training exits 5)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # the port's last server (a run's supervised stage) leaves its connections in TIME_WAIT: not in use
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PortBindError(
            f"the inference server cannot bind {host}:{port} ({exc.strerror or exc}); "
            "pick a free port in tinker.inference_port"
        ) from exc
    sock.set_inheritable(False)
    return sock


def make_server(app: FastAPI) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    return uvicorn.Server(config)


class ServerHandle:
    """A uvicorn server running in a daemon thread; `stop()` shuts it down gracefully."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)


def serve_in_thread(app: FastAPI, host: str, port: int, start_timeout: float = 30.0) -> ServerHandle:
    """Serve `app` on host:port from a background thread; returns once it accepts connections.

    Raises PortBindError if the port cannot be bound, RuntimeError if uvicorn fails to start.
    """
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = make_server(app)
    # uvicorn installs no signal handlers off the main thread: the caller keeps owning signals.
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="inference-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the inference server did not start on {host}:{bound_port}")
        time.sleep(0.02)
    return ServerHandle(server, thread, host, bound_port)
