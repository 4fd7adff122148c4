#!/usr/bin/env bash
# Harbor's own agent (terminus-2, run by `harbor run` in its Python 3.12 environment) against a
# model we serve with `skyrl serve`; the episode's token ids come back from the server's records.
#
#   bash harbor_adapter/scripts/harbor_run_with_skyrl_serve.sh [TASK_DIR] [SERVE_ARGS...]
#   bash harbor_adapter/scripts/harbor_run_with_skyrl_serve.sh harbor_adapter/tasks/hello-file --tiny
#
# Writes $OUT (default /tmp/harbor-serve-run): jobs/ (Harbor's results) and trajectories.json
# (our server's session: calls and merged trajectories with prompt ids, response ids, loss mask,
# logprobs). Needs: Docker, the local base images (`skyrl sandbox build-images`), Python 3.12
# (pyenv), and the Debian and PyPI package indexes (Harbor and Compose v2 are fetched once).
#
# Offline notes: Harbor's docker environment cannot enforce `no-network` without a helper image
# from a registry, so the task is copied with network_mode = "public" (the container then
# reaches the Debian mirror, which terminus-2 uses to install tmux). Debian 12 has no Compose
# v2: Debian 13's docker-compose package is unpacked into a private DOCKER_CONFIG (nothing is
# installed system-wide).
set -euo pipefail
cd "$(dirname "$0")/../.."
TASK=${1:-harbor_adapter/tasks/hello-file}
shift || true
SERVE_ARGS=("$@")
[ ${#SERVE_ARGS[@]} -gt 0 ] || SERVE_ARGS=(--tiny)
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT:-/tmp/harbor-serve-run}
PORT=${PORT:-8765}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/skyrl
SESSION=harbor-$(date +%s)
export LITELLM_LOCAL_MODEL_COST_MAP=True HOSTED_VLLM_API_KEY=unused
mkdir -p "$OUT" "$CACHE"

# 1. Harbor in its own Python 3.12 environment
HARBOR_PY=$("$PY" -m harbor_adapter.harbor_env)
HARBOR=$(dirname "$HARBOR_PY")/harbor

# 2. Docker Compose v2 (Debian 13's package, unpacked, used through a private DOCKER_CONFIG)
export DOCKER_CONFIG=$CACHE/docker-config
if ! docker compose version >/dev/null 2>&1; then
  mkdir -p "$DOCKER_CONFIG/cli-plugins" "$CACHE/apt/lists/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$CACHE/apt/sources.list"
  APT=(-o Dir::Etc::sourcelist="$CACHE/apt/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$CACHE/apt/lists")
  apt-get "${APT[@]}" update -qq
  (cd "$CACHE/apt" && apt-get "${APT[@]}" download -qq docker-compose)
  dpkg -x "$CACHE"/apt/docker-compose_*.deb "$CACHE/apt/x"
  install -m 755 "$CACHE/apt/x/usr/libexec/docker/cli-plugins/docker-compose" "$DOCKER_CONFIG/cli-plugins/"
fi
docker compose version

# 3. The task, with a network Harbor's docker environment can give offline
rm -rf "$OUT/tasks" && mkdir -p "$OUT/tasks"
cp -r "$TASK" "$OUT/tasks/"
TOML=$OUT/tasks/$(basename "$TASK")/task.toml
sed -i 's/^network_mode = .*/network_mode = "public"/' "$TOML"

# 4. Our model server (stopped on exit)
"$PY" -m skyrl_agent.server --port "$PORT" --served-model-name policy --max-model-len 16384 \
  --max-tokens 64 "${SERVE_ARGS[@]}" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 1; done

# 5. harbor run: terminus-2 reaches the model through LiteLLM, one session id per episode
"$HARBOR" run -p "$OUT/tasks/$(basename "$TASK")" -a terminus-2 -e docker -o "$OUT/jobs" -n 1 \
  -m hosted_vllm/policy --ak api_base="http://127.0.0.1:$PORT/v1" --ak session_id="$SESSION" \
  --ak max_turns=2 --ak collect_rollout_details=true --ak enable_summarize=false \
  --ak record_terminal_session=false \
  --ak 'model_info={"max_input_tokens": 16000, "max_output_tokens": 64, "input_cost_per_token": 0, "output_cost_per_token": 0}' \
  || echo "harbor run exited with $?"

# 6. The episode's token ids, from our server's records
curl -sf "http://127.0.0.1:$PORT/v1/sessions/$SESSION" >"$OUT/trajectories.json"
"$PY" - "$OUT/trajectories.json" <<'PY'
import json
import sys

data = json.load(open(sys.argv[1]))
print(f"session {data['id']}: {len(data['calls'])} model calls, {len(data['trajectories'])} trajectories")
for t in data["trajectories"]:
    print(
        f"  prompt {len(t['prompt_ids'])} ids, response {len(t['response_ids'])} ids "
        f"({sum(t['loss_mask'])} sampled), logprobs {'yes' if t.get('rollout_logprobs') else 'no'}"
    )
PY
