"""Held-out evaluation during training: success on the held-out tasks, with a standard error.

:func:`evaluate` samples ``eval_samples`` episodes per held-out prompt at the training
temperature (the same sampler and budgets as the training rollouts) and reports the success
rate (:func:`skyrl_agent.evaluation.episode_success`) with a standard error over prompts, since
the samples of one prompt are not independent. Masked episodes (infrastructure failures) are
counted, never scored.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_agent.evaluation import episode_success
from skyrl_agent.types import PromptItem
from skyrl_gym.metrics import default_aggregate_metrics
from trainers.config import TrainConfig
from trainers.distributed import SINGLE, DistContext
from trainers.rollouts import play

__all__ = ["EvalResult", "evaluate", "gain_in_se", "success_by"]


@dataclass
class EvalResult:
    """Held-out success of the policy at one point of training."""

    success: float
    """Mean success over episodes."""
    success_se: float
    """Standard error of ``success`` over prompts (samples of one prompt are not independent)."""
    reward_mean: float
    """Mean total reward."""
    episodes: int
    """Episodes evaluated (masked ones excluded)."""
    masked: int
    """Episodes lost to infrastructure failures."""
    seconds: float
    """Wall time of the evaluation."""
    env_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """The env's per-episode metrics averaged over the episodes (numbers and true/false ones,
    e.g. ``search``'s ``answer_supported``); in the metrics log as ``env/<name>``."""
    turns_mean: float = 0.0
    """Policy turns per episode."""
    turns_success_mean: float | None = None
    """Policy turns per successful episode (None: none succeeded): a multi-turn task's check that
    success did not come from a shortcut with fewer turns than the task needs."""
    turns_success_min: int | None = None
    """The fewest policy turns of a successful episode (None: none succeeded): a mean can hide a
    few shortcuts behind longer episodes, the least cannot."""
    per_prompt: dict[str, float] = dataclasses.field(default_factory=dict)
    """Success rate of each held-out row, by prompt id (in ``summary.json``, not the metrics log),
    for breakdowns by a row's kind and for paired before/after comparisons."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def log_record(self) -> dict[str, Any]:
        """The ``eval`` line of the metrics log: the fields, env metrics flattened to ``env/<name>``."""
        out = {k: v for k, v in self.as_dict().items() if k not in ("env_metrics", "per_prompt")}
        return {**out, **{f"env/{k}": v for k, v in self.env_metrics.items()}}


def evaluate(
    policy: Any, cfg: TrainConfig, rows: Sequence[PromptItem], seed: int, dist: DistContext = SINGLE
) -> EvalResult:
    """Held-out success: ``cfg.data.eval_samples`` episodes per row at the training temperature.

    Data parallel: each rank plays its shard of the rows; every rank returns the whole result."""
    start = time.perf_counter()
    trajs = play(
        policy,
        rows,
        cfg.rollout,
        cfg.data.env_config,
        n_samples=cfg.data.eval_samples,
        seed=seed + 7919 * dist.rank,
        dist=dist,
        progress=cfg.run.progress and dist.is_main,
        progress_every_s=30.0,
    )
    good = [t for t in trajs if not t.masked]
    won = [t for t in good if episode_success(t)]
    by_prompt: dict[str, list[float]] = defaultdict(list)
    for t in good:
        by_prompt[t.prompt_id].append(float(episode_success(t)))
    means = [sum(v) / len(v) for v in by_prompt.values()]
    success = sum(float(episode_success(t)) for t in good) / len(good) if good else 0.0
    if len(means) > 1:
        mu = sum(means) / len(means)
        se = math.sqrt(sum((m - mu) ** 2 for m in means) / (len(means) - 1) / len(means))
    else:
        se = 0.0
    return EvalResult(
        success=success,
        success_se=se,
        reward_mean=sum(t.reward for t in good) / len(good) if good else 0.0,
        episodes=len(good),
        masked=len(trajs) - len(good),
        seconds=time.perf_counter() - start,
        env_metrics=default_aggregate_metrics([t.env_metrics for t in good]),
        turns_mean=sum(t.num_turns for t in good) / len(good) if good else 0.0,
        turns_success_mean=sum(t.num_turns for t in won) / len(won) if won else None,
        turns_success_min=min(t.num_turns for t in won) if won else None,
        per_prompt={pid: sum(v) / len(v) for pid, v in by_prompt.items()},
    )


def gain_in_se(before: EvalResult, after: EvalResult) -> float:
    """``after.success - before.success`` in standard errors of that difference, taking the two
    evaluations as independent (``sqrt(se_before**2 + se_after**2)``); ``nan`` when neither has
    any spread."""
    se = math.hypot(before.success_se, after.success_se)
    return (after.success - before.success) / se if se > 0 else math.nan


def success_by(per_prompt: Mapping[str, float], kind_of: Mapping[str, str]) -> dict[str, float]:
    """Mean success per kind of held-out row (``kind_of``: prompt id to its kind, e.g. a question
    shape), from :attr:`EvalResult.per_prompt`; a prompt of no known kind counts under ``"?"``."""
    rates: dict[str, list[float]] = defaultdict(list)
    for pid, rate in per_prompt.items():
        rates[kind_of.get(pid, "?")].append(rate)
    return {kind: sum(v) / len(v) for kind, v in sorted(rates.items())}
