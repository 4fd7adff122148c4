"""Compare /app/totals.csv with the expected totals; write named metrics to reward.json."""

import csv
import json

expected = [("north", "120.75"), ("south", "100.00"), ("west", "50.00"), ("east", "13.33")]
rows = []
header_ok = False
try:
    with open("/app/totals.csv", newline="") as f:
        reader = csv.reader(f)
        header_ok = next(reader, None) == ["region", "total"]
        rows = [tuple(r) for r in reader if r]
except OSError:
    pass
correct = sum(1 for a, b in zip(rows, expected, strict=False) if a == b)
solved = header_ok and rows == expected
metrics = {"reward": 1.0 if solved else 0.0, "rows_correct": correct, "header_ok": 1.0 if header_ok else 0.0}
with open("/logs/verifier/reward.json", "w") as f:
    json.dump(metrics, f)
print(metrics)
