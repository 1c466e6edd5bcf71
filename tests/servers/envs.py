"""Environments for the real model servers the protocol tests start (MLServer, KServe's model
server). Each gets its own virtual environment: they cannot share one with each other (mlserver
1.7 needs fastapi<0.116, kserve 0.21 starlette>=1.3, which that fastapi refuses) nor with
leakmeter's (kserve pins pandas<3 and protobuf<7, and onnx needs protobuf>=6.31). The pins are
the `mlserver` and `kserve` extras of pyproject.toml; this environment's packages stay visible
(--system-site-packages), so only what a server needs beyond them is installed.

    python tests/servers/envs.py            # create or update both (what .ci/run does)

Where: $LEAKMETER_SERVERS_DIR, default ~/.cache/leakmeter-servers/<extra>. Tests that need a
server skip, saying this command, when its environment is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("mlserver", "kserve")
CHECK = {"mlserver": "import mlserver, mlserver_sklearn", "kserve": "import kserve"}


def home() -> Path:
    return Path(os.environ.get("LEAKMETER_SERVERS_DIR", Path.home() / ".cache" / "leakmeter-servers"))


def pins(extra: str) -> list[str]:
    """The extra's requirements, as pyproject.toml pins them."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["project"]["optional-dependencies"][extra])


def python_for(extra: str) -> Path | None:
    """The environment's python when it exists and imports its server, else None."""
    exe = home() / extra / "bin" / "python"
    if not exe.exists():
        return None
    ok = subprocess.run([str(exe), "-c", CHECK[extra]], capture_output=True, timeout=120).returncode == 0
    return exe if ok else None


def create(extra: str) -> Path:
    """Create (or update) the environment of `extra`; returns its python."""
    where = home() / extra
    if not (where / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(where)], check=True)
    exe = where / "bin" / "python"
    subprocess.run([str(exe), "-m", "pip", "install", "-q", *pins(extra)], check=True)
    return exe


if __name__ == "__main__":
    failed = []
    for name in sys.argv[1:] or EXTRAS:
        try:
            print(f"servers: {name} -> {create(name)}", flush=True)
        except (subprocess.CalledProcessError, OSError) as exc:
            failed.append(name)
            print(f"servers: {name} could not be installed ({exc})", flush=True)
    sys.exit(1 if failed else 0)
