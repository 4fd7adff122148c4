"""Turn the verifier's files into a reward, as Harbor does, or into an error.

``/logs/verifier/reward.json`` is read first: an object of named numbers (``{"reward": 1.0,
"tests_passed": 3}``) or a bare number. Otherwise ``/logs/verifier/reward.txt``: one number.
A missing, empty, non-numeric, NaN or infinite value raises :class:`RewardError`; it is never
read as 0. The reward of a ``reward.json`` with several values is its ``reward`` key.
"""

from __future__ import annotations

import json
import math
from typing import Any

from harbor_adapter.errors import RewardError

__all__ = ["parse_reward", "REWARD_JSON", "REWARD_TXT", "VERIFIER_DIR"]

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
