"""Before publishing: is pyproject.toml's distribution name still free on PyPI, or ours? (`make pypi-name`)

It asks the registry as a user's installer would, `pip index versions NAME` and `pip download --no-deps
NAME`, and prints both answers. A name is ours when what the registry serves under it holds this
project's packages (`rl_mcp/` and `tinker_atropos/`): `rl-mcp`, the name this product first had, turned
out to be another author's project, and every launch line would have started that project's code.
Exit 0: free or ours; 1: another project holds it; 2: the registry could not be asked.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUR_PACKAGES = ("rl_mcp/", "tinker_atropos/")
NOT_FOUND = ("No matching distribution found", "from versions: none")


def ask(argv: list[str]) -> subprocess.CompletedProcess[str]:
    print(f"$ {' '.join(argv[1:])}", flush=True)
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)
    print((done.stdout + done.stderr).strip() or "(no output)", f"\n(exit {done.returncode})\n", flush=True)
    return done


def members(path: Path) -> list[str]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.namelist()
    with tarfile.open(path) as sdist:
        return ["/".join(name.split("/")[1:]) for name in sdist.getnames()]  # without the sdist's top folder


def holds_ours(names: list[str]) -> bool:
    return all(any(f"/{p}" in f"/{n}" for n in names) for p in OUR_PACKAGES)


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    index = ask(["-m", "pip", "index", "versions", name])
    with tempfile.TemporaryDirectory() as folder:
        download = ask(["-m", "pip", "download", "--no-deps", "--quiet", "-d", folder, name])
        files = sorted(f for f in Path(folder).iterdir() if f.name.endswith((".whl", ".tar.gz")))
        if index.returncode != 0 and download.returncode != 0:
            if all(any(m in d.stdout + d.stderr for m in NOT_FOUND) for d in (index, download)):
                print(f"{name}: free on the registry (neither look-up found a distribution)")
                return 0
            print(f"{name}: the registry could not be asked (see the output above)")
            return 2
        if not files:
            print(f"{name}: the index lists it, but no file could be downloaded to check whose it is")
            return 1
        if all(holds_ours(members(f)) for f in files):
            print(f"{name}: ours ({', '.join(f.name for f in files)} holds {' and '.join(OUR_PACKAGES)})")
            return 0
        print(
            f"{name}: TAKEN by another project ({', '.join(f.name for f in files)} does not hold this one's packages)"
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
