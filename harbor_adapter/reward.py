"""Turn the verifier's files into a reward, as Harbor does, or into an error.

``/logs/verifier/reward.json`` is read first: an object of named numbers (``{"reward": 1.0,
"tests_passed": 3}``) or a bare number. Otherwise ``/logs/verifier/reward.txt``: one number.
A missing, empty, non-numeric, NaN or infinite value raises :class:`RewardError`; it is never
read as 0. The reward of a ``reward.json`` with several values is its ``reward`` key.

A multi-step task's reward follows from its steps' (:func:`combine_steps`): their mean (per
key; a key a step lacks counts 0) or the last step's, over the steps that ran.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from harbor_adapter.errors import RewardError
from harbor_adapter.types import RewardStrategy

__all__ = ["parse_reward", "combine_steps", "REWARD_JSON", "REWARD_TXT", "VERIFIER_DIR"]

VERIFIER_DIR = "/logs/verifier"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardError(f"non-numeric reward {value!r} in {where}")
    if not math.isfinite(value):
        raise RewardError(f"non-finite reward {value!r} in {where}")
    return float(value)


def parse_reward(json_bytes: bytes | None, txt_bytes: bytes | None) -> tuple[float, dict[str, float]]:
    """The reward and the named metrics from the verifier's files (``None``: the file does not
    exist). Raises :class:`RewardError` when there is no usable reward."""
    if json_bytes is not None:
        text = json_bytes.decode("utf-8", "replace").strip()
        if not text:
            raise RewardError(f"reward file {REWARD_JSON} is empty")
        try:
            data = json.loads(text)  # json.loads reads NaN and Infinity: rejected below
        except json.JSONDecodeError as exc:
            raise RewardError(f"{REWARD_JSON} is not JSON ({exc}): {text[:200]!r}") from None
        if isinstance(data, dict):
            if not data:
                raise RewardError(f"{REWARD_JSON} holds an empty object")
            metrics = {str(k): _finite(v, REWARD_JSON) for k, v in data.items()}
            if "reward" in metrics:
                return metrics["reward"], metrics
            if len(metrics) == 1:
                return next(iter(metrics.values())), metrics
            raise RewardError(
                f"{REWARD_JSON} has several values {sorted(metrics)} and no 'reward' key to train on"
            )
        value = _finite(data, REWARD_JSON)
        return value, {"reward": value}
    if txt_bytes is not None:
        text = txt_bytes.decode("utf-8", "replace").strip()
        if not text:
            raise RewardError(f"reward file {REWARD_TXT} is empty")
        try:
            value = float(text)
        except ValueError:
            raise RewardError(f"non-numeric reward {text[:200]!r} in {REWARD_TXT}") from None
        value = _finite(value, REWARD_TXT)
        return value, {"reward": value}
    raise RewardError(f"no reward file: the verifier wrote neither {REWARD_JSON} nor {REWARD_TXT}")


def combine_steps(
    steps: Sequence[tuple[float, Mapping[str, float]]], strategy: RewardStrategy
) -> tuple[float, dict[str, float]]:
    """The task's reward and metrics from its steps' ``(reward, metrics)``, in order, by
    ``strategy``: ``final`` takes the last step's, ``mean`` averages over the steps (each metric
    key over every step, a step without it counting 0)."""
    if not steps:
        raise RewardError("no step of the task has a reward")
    if strategy is RewardStrategy.FINAL:
        reward, metrics = steps[-1]
        return reward, dict(metrics)
    n = len(steps)
    keys = sorted({k for _, metrics in steps for k in metrics})
    metrics = {k: sum(m.get(k, 0.0) for _, m in steps) / n for k in keys}
    return sum(r for r, _ in steps) / n, metrics
