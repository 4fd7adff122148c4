"""A separate Python 3.12 environment with Harbor itself, for cross-checks and ``harbor run``.

The ``harbor`` package needs Python 3.12 or newer, so it cannot share this project's 3.11
environment. This module finds (or makes) a virtual environment with it::

    python -m harbor_adapter.harbor_env            # make it (pip from the package index) and print its python
    python -m harbor_adapter.harbor_env --find     # print it, exit 1 when there is none

Run Harbor with :func:`harbor_subprocess_env` as the environment: it puts this project's Harbor
environment class (``harbor_plugin/skyrl_docker_env.py``) on ``PYTHONPATH`` and keeps Harbor and
LiteLLM off the network (no telemetry, no model-table fetch).

The location is ``$SKYRL_HARBOR_VENV``, else ``~/.cache/skyrl/harbor-<version>-py312``. Python
3.12 is ``$SKYRL_PYTHON312``, ``python3.12`` on ``PATH``, or a pyenv 3.12 install.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from skyrl_gym.errors import MissingDependencyError, SkyRLError

__all__ = [
    "HARBOR_VERSION",
    "venv_dir",
    "find_harbor_python",
    "find_python312",
    "create_harbor_venv",
    "harbor_subprocess_env",
    "plugin_dir",
]

#: The Harbor release this adapter is checked against.
HARBOR_VERSION = "0.25.0"


def plugin_dir() -> Path:
    """The folder holding ``skyrl_docker_env.py`` (put it on Harbor's ``PYTHONPATH``)."""
    return Path(__file__).resolve().parent / "harbor_plugin"


def harbor_subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a Harbor subprocess: the plugin on ``PYTHONPATH``, Harbor's telemetry
    off, LiteLLM on its bundled model table (no fetch), a placeholder key for local endpoints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin_dir()), env.get("PYTHONPATH", "")) if p)
    env["HARBOR_TELEMETRY"] = "0"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.setdefault("HOSTED_VLLM_API_KEY", "local")
    env.setdefault("OPENAI_API_KEY", "local")
    env.update(extra or {})
    return env


def venv_dir() -> Path:
    """Where the Harbor environment lives (or will)."""
    env = os.environ.get("SKYRL_HARBOR_VENV")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "skyrl" / f"harbor-{HARBOR_VERSION}-py312"


def find_harbor_python(timeout_s: float = 120.0) -> Path | None:
    """The environment's python when Harbor imports there, else None."""
    python = venv_dir() / "bin" / "python"
    if not python.exists():
        return None
    try:
        probe = subprocess.run(
            [str(python), "-c", "import harbor.models.task.task"], capture_output=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if probe.returncode == 0 else None


def find_python312() -> Path | None:
    """A working Python 3.12: ``$SKYRL_PYTHON312``, a pyenv 3.12 install, or ``python3.12`` on
    PATH (a pyenv shim on PATH may not run: each candidate is tried)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(glob.glob(str(pyenv / "versions" / "3.12*" / "bin" / "python3.12")), reverse=True)
    for candidate in (os.environ.get("SKYRL_PYTHON312"), *found, shutil.which("python3.12")):
        if not candidate or not Path(candidate).exists():
            continue
        try:
            probe = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0 and probe.stdout.startswith("Python 3.12"):
            return Path(candidate)
    return None


def create_harbor_venv(timeout_s: float = 1200.0) -> Path:
    """Make the environment with ``harbor==HARBOR_VERSION`` (about 120 packages, no torch)."""
    existing = find_harbor_python()
    if existing is not None:
        return existing
    python312 = find_python312()
    if python312 is None:
        raise MissingDependencyError(
            "python3.12", "harbor", "running Harbor's own tools (install Python 3.12)"
        )
    target = venv_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([str(python312), "-m", "venv", "--clear", str(target)], check=True, timeout=300)
        subprocess.run(
            [str(target / "bin" / "pip"), "install", "-q", f"harbor=={HARBOR_VERSION}"],
            check=True,
            timeout=timeout_s,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise SkyRLError(f"could not make the Harbor environment in {target}: {exc}") from exc
    python = find_harbor_python()
    if python is None:
        raise SkyRLError(f"Harbor does not import in {target} after installing it")
    return python


def main(argv: list[str] | None = None) -> int:
    """Command line: make (default) or find the environment; print its python."""
    parser = argparse.ArgumentParser(prog="python -m harbor_adapter.harbor_env", description=__doc__)
    parser.add_argument("--find", action="store_true", help="only look; exit 1 when there is none")
    args = parser.parse_args(argv)
    python = find_harbor_python() if args.find else create_harbor_venv()
    if python is None:
        print(f"no Harbor environment in {venv_dir()}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
