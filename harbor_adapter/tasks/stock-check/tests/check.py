"""Reward 1 when /app/low_stock.txt lists exactly the low-stock items, sorted."""

from pathlib import Path

EXPECTED = ["anchor", "hex bolt", "wing nut"]
out = Path("/app/low_stock.txt")
lines = [line.strip() for line in out.read_text().splitlines() if line.strip()] if out.is_file() else []
Path("/logs/verifier/reward.txt").write_text("1" if lines == EXPECTED else "0")
print("found", lines, "expected", EXPECTED)
