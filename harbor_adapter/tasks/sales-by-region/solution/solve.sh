#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import csv
from collections import defaultdict

seen = set()
totals = defaultdict(float)
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        key = tuple(row.values())
        if key in seen:
            continue
        seen.add(key)
        amount = (row["amount"] or "").strip()
        try:
            value = float(amount)
        except ValueError:
            continue
        totals[row["region"].strip().lower()] += value
with open("/app/totals.csv", "w", newline="") as f:
    out = csv.writer(f, lineterminator="\n")
    out.writerow(["region", "total"])
    for region, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        out.writerow([region, f"{total:.2f}"])
PY
cat /app/totals.csv
