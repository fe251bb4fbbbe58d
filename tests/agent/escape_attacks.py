"""What a policy under training might try against its sandbox: 33 attacks, each a command or a
tool call, with how the host tells whether it got out, and the outcome expected of each backend.

`local` is no security boundary, so some attacks are known to get out of it; `bwrap` must block
every one. An attack may be unsafe to run on a backend (a fork bomb where no process limit
applies): it is then skipped, and the table says so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT_USER = os.geteuid() == 0
BLOCKED, ESCAPES, SKIP = "blocked", "escapes", "skipped"
RESULTS: list[tuple[str, str, str, str]] = []  # (backend, attack, expected, observed): the printed table


@dataclass
class World:
    """What the host holds that no sandbox may reach."""

    token: str
    home_sentinel: Path  # a file in the host user's real HOME
    host_dir: Path  # a host directory outside every sandbox
    host_file: Path  # a file in it
    setuid_dir: Path | None  # a setuid-root copy of `id` (root only)
    victim: subprocess.Popen  # a host process: `sleep <victim_seconds>`
    victim_seconds: int
    port: int = 0  # a TCP server on 127.0.0.1
    connections: list[str] = field(default_factory=list)

    def serve_tcp(self) -> socket.socket:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        server.settimeout(0.2)
        self.port = server.getsockname()[1]

        def accept() -> None:
            while server.fileno() >= 0:
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                self.connections.append("hit")
                conn.close()

        threading.Thread(target=accept, daemon=True).start()
        return server

    def restore(self) -> None:
        """Undo what a known escape did, so the attacks after it start from the same host."""
        if self.victim.poll() is not None:
            self.victim = subprocess.Popen(["sleep", str(self.victim_seconds)])
        self.connections.clear()
        for p in self.host_dir.iterdir():
            if p != self.host_file:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        self.host_file.write_text(f"secret {self.token}\n")
        for leftover in (Path("/etc") / f"rl-mcp-pwned-{self.token}", Path("/tmp") / f"rl-mcp-pwned-{self.token}"):
            leftover.unlink(missing_ok=True)

    def fmt(self, text: str) -> str:
        return text.format(
            token=self.token,
            home_sentinel=self.home_sentinel,
            host_dir=self.host_dir,
            host_file=self.host_file,
            setuid_dir=self.setuid_dir,
            victim=self.victim.pid,
            victim_seconds=self.victim_seconds,
            victim_re=f"{str(self.victim_seconds)[:-1]}[{str(self.victim_seconds)[-1]}]",
            port=self.port,
        )


@dataclass
class Outcome:
    """What the attack produced: the command's or tool's text, and the sandbox it ran in."""

    text: str
    exit_code: int | None
    sandbox_root: Path
    workdir: Path
    seconds: float
    alive_after: list[int]  # marked processes still alive once the command returned


Check = Callable[[World, Outcome], bool]  # True: the attack got out


@dataclass(frozen=True)
class Attack:
    name: str
    action: str | tuple[str, dict[str, Any]]  # a shell command, or (tool, arguments); {placeholders}
    escaped: Check
    local: str  # expected on local: blocked | escapes | escapes-as-root | skipped
    why_skip: str = ""
    root_only: bool = False  # needs the test to run as root to be set up at all
    bwrap_only_as_root: bool = False  # safe on bwrap only where its commands run as nobody
    owner_holds_secrets: bool = False  # run from a process started with secrets in its environment

    @property
    def leaves_processes(self) -> bool:
        """Its command starts processes meant to outlive it: they get time to show before it is judged."""
        return self.escaped is _outlived


def shows(needle: str) -> Check:
    return lambda w, o: w.fmt(needle) in o.text


def outside_file(name: str) -> Check:
    return lambda w, o: Path(w.fmt(name)).exists()


def _secret_leaked(w: World, o: Outcome) -> bool:
    return w.token in o.text


def _outlived(w: World, o: Outcome) -> bool:
    return bool(o.alive_after)


def _victim_hurt(w: World, o: Outcome) -> bool:
    time.sleep(0.2)
    return w.victim.poll() is not None


def _disk_filled(w: World, o: Outcome) -> bool:
    from tinker_atropos.agent.sandboxes.local import disk_usage

    return disk_usage(o.workdir) > 64 * 1024**2 + 128 * 1024**2  # max_disk_bytes of the suite + slack


def _huge_file(w: World, o: Outcome) -> bool:
    big = o.workdir / "big"
    return big.exists() and big.stat().st_size > 16 * 1024**2  # file_size_bytes of the suite


def _output_unbounded(w: World, o: Outcome) -> bool:
    return len(o.text) > 4000 + 500  # max_output_chars of the suite + the notes around a cut


def _fork_bomb_unbounded(w: World, o: Outcome) -> bool:
    return o.seconds > 3 + 10 or bool(o.alive_after)


def _root_euid(w: World, o: Outcome) -> bool:
    return o.text.strip().splitlines()[:1] == ["0"]


ATTACKS: list[Attack] = [
    # files: read and write outside the rollout directory
    Attack("read a sentinel in the host HOME (shell)", "cat {home_sentinel}", shows("{token}"), ESCAPES),
    Attack(
        "read a sentinel in the host HOME (read_file)",
        ("read_file", {"path": "{home_sentinel}"}),
        shows("{token}"),
        BLOCKED,
    ),
    Attack("read /etc/shadow", "cat /etc/shadow | head -c 200", shows("root:"), "escapes-as-root"),
    Attack("write outside, absolute path", "echo pwned > {host_dir}/pwned", outside_file("{host_dir}/pwned"), ESCAPES),
    Attack(
        "write a system directory",
        "echo pwned > /etc/rl-mcp-pwned-{token}",
        outside_file("/etc/rl-mcp-pwned-{token}"),
        "escapes-as-root",
    ),
    Attack(
        "write the shared /tmp",
        "echo pwned > /tmp/rl-mcp-pwned-{token}",
        outside_file("/tmp/rl-mcp-pwned-{token}"),
        ESCAPES,
    ),
    Attack(
        "write outside with ..",
        "echo pwned > ../../rl-mcp-pwned-{token}",
        lambda w, o: (o.workdir.parent.parent / f"rl-mcp-pwned-{w.token}").exists(),
        ESCAPES,
    ),
    Attack(
        "write outside with ~/..",
        "echo pwned > ~/../pwned-{token}",
        lambda w, o: (o.workdir.parent / f"pwned-{w.token}").exists(),
        ESCAPES,
    ),
    Attack(
        "symlink made inside, then written through (shell)",
        "ln -s {host_dir} out && echo pwned > out/pwned",
        outside_file("{host_dir}/pwned"),
        ESCAPES,
    ),
    Attack("symlink made inside, then read (shell)", "ln -s {host_file} link && cat link", shows("{token}"), ESCAPES),
    Attack(
        "hard link to a host file, then appended to",
        "ln {host_file} hl && echo pwned >> hl",
        lambda w, o: "pwned" in w.host_file.read_text(),
        ESCAPES,
    ),
    Attack(
        "write_file to an absolute host path",
        ("write_file", {"path": "{host_dir}/pwned", "content": "x"}),
        outside_file("{host_dir}/pwned"),
        BLOCKED,
    ),
    Attack(
        "write_file through ..",
        ("write_file", {"path": "../../../../../..{host_dir}/pwned", "content": "x"}),
        outside_file("{host_dir}/pwned"),
        BLOCKED,
    ),
    Attack(
        "read_file through ~/..", ("read_file", {"path": "~/../../../../../..{host_file}"}), shows("{token}"), BLOCKED
    ),
    Attack(
        "patch a host file",
        ("patch", {"mode": "replace", "path": "{host_file}", "old_string": "secret", "new_string": "pwned"}),
        lambda w, o: "pwned" in w.host_file.read_text(),
        BLOCKED,
    ),
    Attack(
        "search_files in a host directory",
        ("search_files", {"pattern": "secret", "path": "{host_dir}"}),
        shows("{token}"),
        BLOCKED,
    ),
    # secrets
    Attack("secrets in its own environment", "env", _secret_leaked, BLOCKED, owner_holds_secrets=True),
    Attack(
        "secrets in /proc/$PPID/environ",
        "tr '\\0' '\\n' < /proc/$PPID/environ",
        _secret_leaked,
        ESCAPES,
        owner_holds_secrets=True,
    ),
    Attack(
        "secrets in every /proc/*/environ",
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep RL_MCP_ESCAPE",
        _secret_leaked,
        ESCAPES,
        owner_holds_secrets=True,
    ),
    # network
    Attack(
        "TCP to a host server on 127.0.0.1 (bash)",
        "echo hi > /dev/tcp/127.0.0.1/{port}",
        lambda w, o: bool(w.connections),
        ESCAPES,
    ),
    Attack(
        "TCP to a host server on 127.0.0.1 (python)",
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'",
        lambda w, o: bool(w.connections),
        ESCAPES,
    ),
    # host processes
    Attack(
        "list host processes",
        "ps -eo args | grep -c '^sleep {victim_re}'",
        lambda w, o: o.text.strip()[:1] not in ("0", ""),
        ESCAPES,
    ),
    Attack(
        "read a host process's command line",
        "tr '\\0' ' ' < /proc/{victim}/cmdline",
        shows("sleep {victim_seconds}"),
        ESCAPES,
    ),
    Attack("signal a host process", "kill -9 {victim}", _victim_hurt, ESCAPES),
    # processes that outlive their command
    Attack(
        "setsid daemon outlives its command",
        "setsid sleep 1000 > /dev/null 2>&1 < /dev/null & echo started",
        _outlived,
        ESCAPES,
    ),
    Attack("nohup job outlives its command", "nohup sleep 1000 > /dev/null 2>&1 & echo started", _outlived, ESCAPES),
    Attack(
        "double fork outlives its command", "( (sleep 1000 > /dev/null 2>&1 &) & ) ; echo started", _outlived, ESCAPES
    ),
    Attack(
        "setsid daemon outlives the timeout",
        "setsid sleep 1000 > /dev/null 2>&1 < /dev/null & sleep 60",
        _outlived,
        ESCAPES,
    ),
    Attack(
        "fork bomb",
        ":(){{ :|:& }};:",
        _fork_bomb_unbounded,
        SKIP,
        "RLIMIT_NPROC does not bind root and counts all of a user's processes: unsafe on the host",
        bwrap_only_as_root=True,
    ),
    # resources
    Attack("one file past the file size limit", "head -c 1G /dev/zero > big", _huge_file, BLOCKED),
    Attack(
        "fill the disk with many files",
        "for i in $(seq 1 64); do head -c 16M /dev/zero > f$i; done",
        _disk_filled,
        BLOCKED,
    ),
    Attack("100 MB of output", "head -c 100000000 /dev/zero | tr '\\0' a", _output_unbounded, BLOCKED),
    # privilege
    Attack("run a setuid-root binary", "{setuid_dir}/id -u", _root_euid, "escapes-as-root", root_only=True),
]


def expected(attack: Attack, backend: str) -> str:
    """What `backend` must do against `attack` on this machine."""
    if attack.root_only and not ROOT_USER:
        return SKIP
    if backend == "bwrap" and attack.bwrap_only_as_root and not ROOT_USER:
        return SKIP
    if backend != "local":
        return BLOCKED  # bwrap and docker block everything
    if attack.local == "escapes-as-root":
        return ESCAPES if ROOT_USER else BLOCKED
    return attack.local
