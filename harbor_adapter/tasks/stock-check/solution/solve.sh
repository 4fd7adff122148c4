#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import json
import os
import urllib.request

base = os.environ.get("INVENTORY_URL", "http://inventory:8080")
ids = json.load(urllib.request.urlopen(f"{base}/items", timeout=10))
items = [json.load(urllib.request.urlopen(f"{base}/items/{i}", timeout=10)) for i in ids]
low = sorted(item["name"] for item in items if item["stock"] < 5)
with open("/app/low_stock.txt", "w") as f:
    f.write("\n".join(low) + "\n")
PY
cat /app/low_stock.txt
