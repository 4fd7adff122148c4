#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), starts Docker, lints, and runs the whole test suite
# except tests marked `gpu`. Extra arguments go to pytest, e.g. `bash scripts/test.sh -k tools`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
if bash scripts/start-docker.sh; then
  export SKYRL_REQUIRE_DOCKER=${SKYRL_REQUIRE_DOCKER:-${CI:+1}}
  # The offline base images every Docker test starts from (skipped when their tags exist). The
  # tests' `base_images` fixture builds them too, so `pytest` alone works in any order.
  echo "[test] base images"
  .venv/bin/skyrl sandbox build-images
else
  echo "[test] no Docker daemon: tests marked 'docker' will be skipped" >&2
fi
# Harbor itself needs Python 3.12: where one exists, a separate environment with it lets the
# cross-check tests run Harbor's own task loader on our bundled tasks (they skip otherwise)
if .venv/bin/python -c "import sys; from harbor_adapter.harbor_env import find_python312; sys.exit(find_python312() is None)"; then
  .venv/bin/python -m harbor_adapter.harbor_env >/dev/null || echo "[test] could not make Harbor's Python 3.12 environment; its cross-checks will skip" >&2
fi
echo "[test] ruff check + format"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] pytest"
exec .venv/bin/python -m pytest -m "not gpu" --durations=40 "$@"
