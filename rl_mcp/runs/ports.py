"""Free loopback ports for a run's run-api and inference server.

The OS hands out a free port when we bind port 0, but it is free again the moment we close the
probe socket; a second run starting in that window could get the same number. So a port stays
reserved here from allocation until its process has bound it (readiness answered) or the start
failed, and ports of runs still active in the registry (any server lifetime) are never handed out.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable


class PortReservations:
    def __init__(self, in_use: Callable[[], set[int]] = set) -> None:
        self._in_use = in_use
        self._reserved: set[int] = set()
        self._lock = threading.Lock()

    def reserve(self, count: int, *, attempts: int = 200) -> list[int]:
        """`count` distinct free ports, each held until `release`."""
        with self._lock:
            taken = self._reserved | self._in_use()
            ports: list[int] = []
            for _ in range(attempts):
                port = _probe_free_port()
                if port not in taken and port not in ports:
                    ports.append(port)
                    if len(ports) == count:
                        self._reserved.update(ports)
                        return ports
            raise RuntimeError(f"no free loopback port found after {attempts} attempts")

    def reserve_exact(self, port: int) -> int | None:
        """`port` itself, held until `release`, when it is free and not taken; else None."""
        with self._lock:
            if port in self._reserved or port in self._in_use() or not _is_free(port):
                return None
            self._reserved.add(port)
            return port

    def release(self, ports: Iterable[int]) -> None:
        with self._lock:
            self._reserved.difference_update(ports)

    @property
    def reserved(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._reserved)


def _probe_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
