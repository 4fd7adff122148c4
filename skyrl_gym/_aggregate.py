"""Averaging per-episode env metrics (the default of ``BaseTextEnv.aggregate_metrics``)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["default_aggregate_metrics"]


def default_aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Average every numeric or bool field over the episodes that report it.

    Non-numeric fields and NaN values are dropped. An empty list gives an empty dict.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for episode in metrics:
        for key, value in episode.items():
            if isinstance(value, bool) or isinstance(value, (int, float)):
                value = float(value)
                if math.isnan(value):
                    continue
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}
