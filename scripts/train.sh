#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: `skyrl train` with its defaults,
# the bundled SmolLM2-135M-Instruct learning the two-turn calculator tool-use task on CPU, with
# held-out evaluation before and after, a summary and a plot. Extra arguments go to `skyrl train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/skyrl train --run-dir "runs/calculator-$(date +%Y%m%d-%H%M%S)" "$@"
