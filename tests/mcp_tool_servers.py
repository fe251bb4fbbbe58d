"""Shared by the `mcp` format's tests: where `make mcp-servers` puts the PyPI servers, and a git
repository for mcp-server-git to serve (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVERS_VENV = ROOT / ".venv-mcp-servers" / "bin"


def git_repo(root: Path, message: str) -> Path:
    """A repository at root/repo with one committed file, on branch main."""
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", message], check=True)
    return repo
