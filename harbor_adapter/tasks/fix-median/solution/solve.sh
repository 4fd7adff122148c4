#!/bin/bash
set -euo pipefail
cat > /app/stats.py <<'PY'
"""Small statistics helpers."""


def mean(values: list[float]) -> float:
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def median(values: list[float]) -> float:
    """The median of a non-empty list of numbers."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
PY
python3 /app/test_stats.py
