#!/bin/bash
# Named metrics per step; the reward is 1 only when every step is done.
python3 - <<'PY'
import json
import os

def read(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return None

steps = {
    "failed_ids": read("/app/report/failed.txt") == ["r001", "r002", "r009", "r015"],
    "failed_total": read("/app/report/failed_total.txt") == ["1305.70"],
    "archive_moved": os.path.isfile("/app/processed/batch.tar.gz") and os.listdir("/app/incoming") == []
    if os.path.isdir("/app/incoming") else False,
    "clean": sorted(os.listdir("/app")) == ["incoming", "processed", "report"],
}
metrics = {name: float(ok) for name, ok in steps.items()}
metrics["reward"] = float(all(steps.values()))
with open("/logs/verifier/reward.json", "w") as f:
    json.dump(metrics, f)
print(metrics)
PY
