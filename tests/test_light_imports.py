"""skyrl_gym stays light: importing it and every one of its modules loads no torch."""

import subprocess
import sys

CODE = """
import importlib, pkgutil, sys
import skyrl_gym
for mod in pkgutil.walk_packages(skyrl_gym.__path__, "skyrl_gym."):
    if not mod.name.endswith("__main__"):
        importlib.import_module(mod.name)
heavy = [m for m in ("torch", "transformers", "trl", "datasets", "docker", "litellm") if m in sys.modules]
print(",".join(heavy))
"""


def test_skyrl_gym_imports_no_heavy_dependency():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"skyrl_gym imported {out.stdout.strip()}"


def test_skyrl_agent_package_imports_no_torch():
    code = "import sys, skyrl_agent, skyrl_agent.engine, skyrl_agent.loop; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
