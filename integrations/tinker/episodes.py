"""Our multi-turn episodes as Tinker ``Datum`` s, for a client-side RL loop on the ``tinker`` client.

A client that plays episodes with :class:`~skyrl_agent.engine.RolloutEngine` (against any policy,
a Tinker sampling client's weights among them) trains them through a Tinker server's
``forward_backward(data, "importance_sampling")`` (or ``"ppo"``) with::

    datums = episode_datums(result.trajectories, advantages)
    training.forward_backward(datums, "importance_sampling")

Each episode becomes its training rows (:func:`trainers.rows.training_rows`, the path the native
trainer takes: one row for an append-only history, one per stretch where the context was
rewritten, one per turn with ``step_wise``), each row one datum: ``model_input`` the row's ids but
the last, ``target_tokens`` the ids from the second on, ``logprobs`` the sampler's logprob of each
target, and ``advantages`` the episode's advantage on every target the policy sampled and 0 on
the prompt and the env's observations (which Tinker's losses then leave out). Masked episodes
(infrastructure failures) give no datum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyrl_agent.types import Trajectory
from skyrl_gym.errors import ConfigError
from trainers.rows import training_rows

__all__ = ["episode_datums", "episode_loss_inputs"]


def episode_loss_inputs(
    episodes: Sequence[Trajectory] | Sequence[Sequence[Trajectory]],
    advantages: Sequence[float],
    step_wise: bool = False,
) -> list[dict[str, Any]]:
    """One ``{"tokens", "target_tokens", "logprobs", "advantages", "episode"}`` dict per training
    row of the unmasked ``episodes`` (``advantages[e]`` is episode ``e``'s), in order: what
    :func:`episode_datums` wraps, without the ``tinker`` package."""
    if len(advantages) != len(episodes):
        raise ConfigError(f"{len(advantages)} advantages for {len(episodes)} episodes: give one per episode")
    rows = training_rows(episodes, step_wise=step_wise)
    out = []
    for row, e in zip(rows.rows, rows.episode, strict=True):
        if row.masked or not row.response_ids:
            continue
        if row.rollout_logprobs is None:
            raise ConfigError(
                f"episode {e} has no sampler logprobs (rollout_logprobs is None): Tinker's importance_sampling "
                "and ppo losses need them; play episodes with a policy that returns logprobs"
            )
        ids = list(row.prompt_ids) + list(row.response_ids)
        n = len(row.prompt_ids)
        adv = float(advantages[e])
        out.append(
            {  # per target token (ids[1:]); a trajectory's logprobs are 0.0 where its mask is 0
                "tokens": ids[:-1],
                "target_tokens": ids[1:],
                "logprobs": [0.0] * (n - 1) + list(row.rollout_logprobs),
                "advantages": [0.0] * (n - 1) + [adv if m else 0.0 for m in row.loss_mask],
                "episode": e,
            }
        )
    return out


def episode_datums(
    episodes: Sequence[Trajectory] | Sequence[Sequence[Trajectory]],
    advantages: Sequence[float],
    step_wise: bool = False,
) -> list[Any]:
    """``tinker.types.Datum`` s for :func:`episode_loss_inputs` (module docstring); needs the
    ``tinker`` package (the ``tinker`` extra)."""
    from tinker import types

    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(r["tokens"]),
            loss_fn_inputs={k: r[k] for k in ("target_tokens", "logprobs", "advantages")},
        )
        for r in episode_loss_inputs(episodes, advantages, step_wise=step_wise)
    ]
