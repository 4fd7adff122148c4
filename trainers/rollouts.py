"""The rollouts of a run: a step's groups of episodes, which of them train, and what they report.

:func:`play` runs tasks through :class:`skyrl_agent.engine.RolloutEngine` with the run's budgets
and sampling (the run's :class:`~skyrl_agent.types.RolloutConfig`); under ``torchrun`` each rank plays its contiguous shard
and every rank gets every episode back. :func:`rollout_step` draws a step's prompts from the
resumable :class:`~trainers.data.PromptSampler` and plays ``group_size`` samples of each (the
``produce`` of :class:`~trainers.async_rollouts.AsyncRollouts`). :func:`select_trainable` drops
masked episodes (infrastructure failures, never scored) and groups whose rewards are all equal
(no GRPO signal); :func:`rollout_metrics` is the step's line in the metrics log.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from skyrl_agent.engine import RolloutEngine
from skyrl_agent.episodes import Episode, group_episodes
from skyrl_agent.evaluation import episode_success
from skyrl_agent.failures import count_failures, failure_key, fix_hint
from skyrl_agent.tasks import with_env_config
from skyrl_agent.types import PromptItem, RolloutConfig, Trajectory
from skyrl_gym.errors import EpisodesFailedError
from trainers.async_rollouts import RolloutBatch
from trainers.config import AlgorithmConfig, TrainConfig, parse_env_config
from trainers.data import PromptSampler
from trainers.distributed import SINGLE, DistContext
from trainers.ray_sampler import RaySampler
from trainers.shaping import shape_overlong

__all__ = [
    "play",
    "rollout_step",
    "select_trainable",
    "rollout_metrics",
    "check_not_all_failed",
    "check_staleness",
    "episode_staleness",
]


def play(
    policy: Any,
    items: Sequence[PromptItem],
    rollout: RolloutConfig,
    env_config: Sequence[str] = (),
    *,
    n_samples: int,
    seed: int,
    dist: DistContext = SINGLE,
    progress: bool = False,
    progress_every_s: float = 5.0,
    first_group: int = 0,
) -> list[Trajectory]:
    """``n_samples`` episodes of each item, played with the run's ``rollout`` config (its
    ``n_samples`` and ``seed`` replaced by these) and its ``env_config`` items, every rank's;
    item ``i``'s episodes are group ``first_group + i``.

    Data parallel: this rank plays its contiguous shard of ``items`` with its own ``seed``; group
    ids count over the whole list, so they are the same on every rank. With Ray workers rank 0
    hands them every item and the other ranks play none."""
    remote = isinstance(policy, RaySampler)
    if remote:
        mine = slice(0, len(items) if dist.is_main else 0)
    else:
        mine = dist.shard(len(items))
    config = dataclasses.replace(rollout, n_samples=n_samples, seed=seed)
    shard = with_env_config(items[mine], parse_env_config(env_config))
    groups_from = first_group + mine.start  # group ids over the whole list, not this rank's shard
    if remote:  # the Ray workers play them
        own = policy.play(shard, config, groups_from) if shard else []
    else:
        engine = RolloutEngine(policy, config, progress=progress, progress_every_s=progress_every_s)
        own = engine.run_sync(shard, groups_from).trajectories if shard else []
    trajs = [t for part in dist.all_gather_objects(own) for t in part]
    check_not_all_failed(trajs)
    return trajs


def check_not_all_failed(trajs: Sequence[Trajectory]) -> None:
    """Raise :class:`EpisodesFailedError` when every one of ``trajs`` (at least one) was lost to
    a failure: training or evaluating on nothing would hide it. Its message counts the failures
    by stage and kind, most common first, quotes the most common one and says how to fix it
    (:func:`skyrl_agent.failures.fix_hint`)."""
    if not trajs or not all(t.masked for t in trajs):
        return
    keys = Counter(failure_key(t) for t in trajs)
    listed = "; ".join(f"{n} x {key}" for key, n in keys.most_common(3))
    most_common = keys.most_common(1)[0][0]
    top = next(t for t in trajs if failure_key(t) == most_common)
    first = (top.error or "no error recorded").splitlines()[0][:300]
    hint = (
        fix_hint(top.failure)
        if top.failure is not None
        else "fix that cause (an env that cannot be built or a server that does not answer fails every episode)"
    )
    retried = "" if top.failure is None or top.failure.retriable else " (not retriable, so not retried)"
    raise EpisodesFailedError(
        f"all {len(trajs)} episodes failed before they could be scored, so there is nothing to train on "
        f"or evaluate ({listed}). The most common: {first}{retried}. To fix it: {hint}. A failure that "
        "hits only some episodes is masked and the run goes on"
    )


def rollout_step(
    policy: Any, sampler: PromptSampler, cfg: TrainConfig, dist: DistContext, step: int, version: int
) -> RolloutBatch:
    """One step's rollouts: ``prompts_per_step`` prompts from ``sampler``, ``group_size`` samples
    each, sampled by ``policy`` at trainer version ``version`` (steps finished).

    With ``group_filter="dynamic"`` (DAPO), rounds of new prompts follow while fewer than
    ``prompts_per_step`` groups are informative (rewards not all equal, after overlong shaping),
    up to ``max_sampling_rounds`` rounds: each round draws the missing number of prompts
    divided by the informative rate seen so far (at most ``2 * prompts_per_step``). Informative
    groups beyond ``prompts_per_step`` are dropped, so the update has exactly a full batch; the
    equal-reward groups stay in the batch (logged, counted in ``flat_groups``, not trained)."""
    t_gen = time.perf_counter()
    need = cfg.run.prompts_per_step
    dynamic = cfg.algorithm.group_filter == "dynamic"
    trajs: list[Trajectory] = []
    drawn, rounds, informative = 0, 0, 0
    while True:
        k = need if rounds == 0 else _next_round_size(need - informative, informative, drawn, need)
        batch_items = sampler.next(k)
        seed = cfg.run.seed * 100_003 + step + 1_000_003 * dist.rank + 7_919 * rounds
        new = play(
            policy,
            batch_items,
            cfg.rollout,
            cfg.data.env_config,
            n_samples=cfg.rollout.n_samples,
            seed=seed,
            dist=dist,
            first_group=drawn,  # group ids unique over the step's rounds
        )
        for t in new:
            if t.policy_version is None:  # the local sampler holds the weights of `version`
                t.policy_version = version
        trajs += new
        drawn, rounds = drawn + k, rounds + 1
        if not dynamic:
            break
        informative = len(_informative_groups(trajs, cfg.algorithm, cfg.rollout.max_context_tokens))
        if informative >= need or rounds >= cfg.algorithm.max_sampling_rounds:
            break
    if dynamic and informative > need:  # exactly a full batch of informative groups
        surplus = set(
            sorted(_informative_groups(trajs, cfg.algorithm, cfg.rollout.max_context_tokens))[need:]
        )
        trajs = [t for t in trajs if t.group_id not in surplus]
    position = sampler.state_dict()
    return RolloutBatch(
        step,
        trajs,
        position,
        version,
        time.perf_counter() - t_gen,
        sampling_rounds=rounds,
        prompts_drawn=drawn,
    )


def _next_round_size(missing: int, informative: int, drawn: int, need: int) -> int:
    """Prompts to draw for ``missing`` informative groups, at the informative rate seen so far."""
    rate = informative / drawn if drawn else 0.0
    want = need if rate == 0 else math.ceil(missing / rate)
    return max(missing, min(want, 2 * need))


def _informative_groups(
    trajs: Sequence[Trajectory], algorithm: AlgorithmConfig, max_context_tokens: int
) -> set[int]:
    """Ids of the groups that would train: not all masked, rewards (as shaped) not all equal."""
    shaped, _ = shape_overlong(
        trajs, max_context_tokens, algorithm.overlong_buffer, algorithm.overlong_penalty
    )
    good = [t for t in shaped if not t.masked]
    return {t.group_id for t in good} - _equal_reward_groups(good, by_turn(algorithm.advantage))


def by_turn(advantage: str) -> bool:
    """Whether estimator ``advantage`` gives turns their own advantages (so a group is flat only
    when its episodes' turn rewards are equal turn by turn, not just their totals)."""
    return advantage in ("gigpo", "mt_grpo")


def _equal_reward_groups(trajs: Sequence[Trajectory], turns: bool = False) -> set[int]:
    flat = set()
    for group in group_episodes(trajs):
        r = [e.outcome.reward for e in group.episodes]
        if len(r) < 2 or max(r) - min(r) < 1e-9:
            if not turns or len({_turn_rewards(e) for e in group.episodes}) == 1:
                flat.add(group.group_id)
    return flat


def _turn_rewards(episode: Episode) -> tuple[float, ...]:
    """``episode``'s turn rewards, rounded so that float noise does not tell them apart."""
    return tuple(round(t.reward or 0.0, 9) for t in episode.answered_turns)


def select_trainable(
    trajs: Sequence[Trajectory], skip_equal_reward_groups: bool, turns: bool = False
) -> tuple[list[Trajectory], set[int], list[Trajectory]]:
    """``(good, flat, trainable)``: the episodes not masked, the ids of the groups whose rewards
    are all equal (when ``skip_equal_reward_groups``; else none; with ``turns``, their turn
    rewards equal turn by turn, see :func:`by_turn`), and the good episodes outside those groups."""
    good = [t for t in trajs if not t.masked]
    flat = _equal_reward_groups(good, turns) if skip_equal_reward_groups else set()
    return good, flat, [t for t in good if t.group_id not in flat]


def rollout_metrics(
    rb: RolloutBatch, good: Sequence[Trajectory], flat: set[int], *, step: int, wait_s: float
) -> dict[str, Any]:
    """A step's rollout numbers for the metrics log: rewards and success of the good episodes,
    how many were lost (and, as ``failures/<stage>/<kind>``, to what), lengths, timings and how
    stale the sampler's weights were."""
    trajs = rb.trajectories
    failures = count_failures(trajs)
    return {
        **{f"failures/{key}": n for key, n in sorted(failures.items())},
        "reward_mean": sum(t.reward for t in good) / len(good) if good else 0.0,
        "success_rate": sum(episode_success(t) for t in good) / len(good) if good else 0.0,
        "episodes": len(trajs),
        "masked": len(trajs) - len(good),
        "flat_groups": len(flat),
        "sampling_rounds": rb.sampling_rounds,
        "prompts_drawn": rb.prompts_drawn,
        "response_tokens_mean": sum(t.num_generated_tokens for t in good) / max(len(good), 1),
        "turns_mean": sum(t.num_turns for t in good) / max(len(good), 1),
        "context_rewrites_mean": sum(t.context_rewrites for t in good) / max(len(good), 1),
        "gen_seconds": rb.gen_seconds,
        "wait_seconds": wait_s,
        "policy_version": rb.policy_version,
        "staleness": (step - 1) - rb.policy_version,
        "episode_staleness_max": episode_staleness(trajs, step),
    }


def episode_staleness(trajs: Sequence[Trajectory], step: int) -> int:
    """The most updates any of ``trajs`` lags behind the weights step ``step`` trains (its
    ``policy_version`` against ``step - 1``); 0 when none records a version."""
    return max(((step - 1) - t.policy_version for t in trajs if t.policy_version is not None), default=0)


def check_staleness(trajs: Sequence[Trajectory], step: int, bound: int) -> None:
    """Raise when an episode of step ``step`` was sampled by weights more than ``bound`` updates
    old (``async_staleness``; 0 when synchronous): with Ray workers each records the version it
    loaded, so the bound is checked per episode, not only per batch."""
    worst = episode_staleness(trajs, step)
    if worst > bound:
        raise RuntimeError(
            f"an episode of step {step} was sampled {worst} updates behind (bound {bound}): "
            "the sampler's weights did not follow the updates"
        )
