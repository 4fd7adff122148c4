#!/usr/bin/env bash
# Tinker's own end-to-end suite (e2e/ of github.com/thinking-machines-lab/tinker, kept outside this
# repository) against a local `skyrl tinker serve` of the bundled SmolLM2-135M-Instruct.
#
#   bash scripts/run_tinker_e2e.sh E2E_DIR [pytest arguments]
#
# The suite's conftest.py needs one change, an entry "local" in its ENVS (base_url from
# $TINKER_E2E_BASE_URL, key from $TINKER_API_KEY, model from $TINKER_E2E_LOCAL_MODEL); nothing else
# in the suite is touched. The model is served under its directory path, so the client's
# get_tokenizer() loads it offline by that name. Results: docs/decisions/0014-tinker-compatible-server.md.
set -euo pipefail
E2E=$(cd "$1" && pwd); shift
cd "$(dirname "$0")/.."
PORT=${PORT:-8765}
KEY=tml-e2e-local
MODEL_DIR=$(.venv/bin/skyrl models where)
WORK=$(mktemp -d)
.venv/bin/skyrl tinker serve --port "$PORT" --checkpoint-dir "$WORK/ckpt" --model "$MODEL_DIR=$MODEL_DIR" \
  --api-key "$KEY" > "$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$PORT/api/v1/healthz" > /dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 1
done
cd "$E2E"
TINKER_E2E_ENV=local TINKER_E2E_BASE_URL="http://127.0.0.1:$PORT" TINKER_API_KEY="$KEY" \
  TINKER_E2E_LOCAL_MODEL="$MODEL_DIR" timeout 1800 "$OLDPWD/.venv/bin/python" -m pytest -p no:cacheprovider -rA "$@" .
