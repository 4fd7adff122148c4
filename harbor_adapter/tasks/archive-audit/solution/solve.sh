#!/bin/bash
set -euo pipefail
work=$(mktemp -d)
tar -xzf /app/incoming/batch.tar.gz -C "$work"
mkdir -p /app/report /app/processed
python3 - "$work" <<'PY'
import json
import pathlib
import sys

records = [json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).glob("*.json")]
failed = sorted((r for r in records if r["status"] == "failed"), key=lambda r: r["id"])
pathlib.Path("/app/report/failed.txt").write_text("".join(r["id"] + "\n" for r in failed))
pathlib.Path("/app/report/failed_total.txt").write_text(f"{sum(r['amount'] for r in failed):.2f}\n")
PY
mv /app/incoming/batch.tar.gz /app/processed/batch.tar.gz
rm -rf "$work"
ls -R /app
