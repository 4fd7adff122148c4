"""Evaluation summaries of a batch of episodes: success rate, pass@k, env metrics.

pass@k uses the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
Trained on Code"): for a prompt with ``n`` samples of which ``c`` succeed,
``pass@k = 1 - C(n - c, k) / C(n, k)``, averaged over prompts. Masked episodes (infrastructure
failures) are left out of every rate and counted apart.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_agent.types import Trajectory

__all__ = ["EvalSummary", "SUCCESS_METRICS", "episode_success", "pass_at_k", "summarize"]

#: Env metrics that say whether an episode succeeded, in the order they are looked for.
SUCCESS_METRICS = ("correct", "solved", "resolved")


def episode_success(traj: Trajectory, success_threshold: float = 1.0) -> bool:
    """Whether an episode succeeded: what its env says (the first of :data:`SUCCESS_METRICS`
    in its metrics), else whether its reward reached ``success_threshold``. The one definition
    of success, for ``skyrl eval`` and for the trainer's held-out evaluation."""
    for key in SUCCESS_METRICS:
        if key in traj.env_metrics:
            return bool(traj.env_metrics[key])
    return traj.reward >= success_threshold


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` draws (without replacement) from ``n`` samples with
    ``c`` successes succeeds."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class EvalSummary:
    """Results of an evaluation run."""

    episodes: int
    """Episodes played, masked included."""
    masked: int
    """Episodes spoiled by infrastructure failures (excluded from the rates)."""
    prompts: int
    """Prompts with at least one unmasked episode."""
    mean_reward: float
    """Mean total reward of unmasked episodes."""
    success_rate: float
    """Fraction of unmasked episodes that succeeded (:func:`episode_success`)."""
    pass_at: dict[int, float] = field(default_factory=dict)
    """pass@k for each requested k (over prompts with at least k unmasked samples)."""
    mean_turns: float = 0.0
    """Mean turns per unmasked episode."""
    env_metrics: dict[str, Any] = field(default_factory=dict)
    """The env's ``aggregate_metrics`` over the unmasked episodes' metrics."""

    def table(self) -> str:
        """A short table for terminals."""
        rows = [
            ("episodes (masked)", f"{self.episodes} ({self.masked})"),
            ("prompts", f"{self.prompts}"),
            ("mean reward", f"{self.mean_reward:.4f}"),
            ("success rate", f"{self.success_rate:.4f}"),
            *[(f"pass@{k}", f"{v:.4f}") for k, v in sorted(self.pass_at.items())],
            ("mean turns", f"{self.mean_turns:.2f}"),
            *[
                (f"env: {k}", f"{v:.4f}" if isinstance(v, float) else str(v))
                for k, v in sorted(self.env_metrics.items())
            ],
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def summarize(
    trajectories: Sequence[Trajectory],
    success_threshold: float = 1.0,
    ks: Sequence[int] = (1,),
    aggregate: Any = None,
) -> EvalSummary:
    """Summarize episodes. An episode succeeds as :func:`episode_success` says: its env's
    ``correct``/``solved``/``resolved`` metric, else a reward of at least ``success_threshold``.

    ``aggregate`` is the env class's ``aggregate_metrics`` (default: numeric means).
    """
    good = [t for t in trajectories if not t.masked]
    groups: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for t in good:
        groups[(t.group_id, t.prompt_id)].append(episode_success(t, success_threshold))
    pass_at = {}
    for k in ks:
        eligible = [v for v in groups.values() if len(v) >= k]
        if eligible:
            pass_at[k] = sum(pass_at_k(len(v), sum(v), k) for v in eligible) / len(eligible)
    if aggregate is None:
        from skyrl_gym.metrics import default_aggregate_metrics as aggregate
    return EvalSummary(
        episodes=len(trajectories),
        masked=len(trajectories) - len(good),
        prompts=len(groups),
        mean_reward=sum(t.reward for t in good) / len(good) if good else 0.0,
        success_rate=sum(episode_success(t, success_threshold) for t in good) / len(good) if good else 0.0,
        pass_at=pass_at,
        mean_turns=sum(t.num_turns for t in good) / len(good) if good else 0.0,
        env_metrics=dict(aggregate([t.env_metrics for t in good])) if good else {},
    )
