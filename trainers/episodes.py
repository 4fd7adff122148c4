"""One training update on episodes that something else played: an external agent harness whose
calls ``skyrl serve`` recorded (:func:`skyrl_agent.server.sessions.calls_to_trajectories`), or
any other source of scored :class:`~skyrl_agent.types.Trajectory` objects.

An episode of an external harness can give several trajectories: one per stretch of history the
harness sent (a harness that drops or rewrites earlier messages starts a new one each time). Each
trajectory trains with its episode's advantage, and each episode counts once in its group's
baseline however many trajectories it has (:func:`trainers.advantages.episode_advantages`): the
rows and their index come from :func:`trainers.rows.training_rows`, as in the trainer's own loop.

::

    episodes = [episode.trajectories for episode in played]      # rewards set, one group per task
    stats = train_on_episodes(model, optimizer, episodes, cfg, pad_id=tok.pad_token_id)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skyrl_agent.types import Trajectory
from skyrl_gym.errors import ConfigError
from trainers.advantages import episode_advantages
from trainers.batch import collate
from trainers.config import TrainConfig
from trainers.rows import training_rows
from trainers.step import StepStats, train_step

__all__ = ["train_on_episodes"]


def train_on_episodes(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    episodes: Sequence[Sequence[Trajectory]],
    cfg: TrainConfig,
    *,
    pad_id: int,
) -> StepStats:
    """Collate every trajectory of every episode, give each the advantage of its episode
    (estimator ``cfg.algorithm.advantage`` over the episodes' rewards, grouped by ``group_id``), and run
    :func:`trainers.step.train_step`.

    Every trajectory of an episode must carry the episode's ``reward`` and ``group_id`` (episodes
    of one task share a group). Masked trajectories (infrastructure failures) and episodes left
    without any are dropped. Raises :class:`ConfigError` when nothing is left to train on, or when
    an episode's trajectories disagree on reward or group."""
    kept: list[list[Trajectory]] = []
    for e, trajectories in enumerate(episodes):
        live = [t for t in trajectories if not t.masked]
        if not live:
            continue
        if len({(t.reward, t.group_id) for t in live}) > 1:
            raise ConfigError(
                f"episode {e}: its trajectories carry different rewards or group ids "
                f"{sorted({(t.reward, t.group_id) for t in live})}; score the episode once and give "
                "every trajectory that reward (skyrl_agent.server.sessions.with_reward)"
            )
        kept.append(live)
    if not kept:
        raise ConfigError("no episode has a trajectory to train on (all empty or masked)")
    rows = training_rows(kept)
    batch = collate(rows.rows, pad_id=pad_id)
    adv_E = episode_advantages(
        cfg.algorithm.advantage,
        torch.tensor([ts[0].reward for ts in kept], dtype=torch.float32),
        torch.tensor([ts[0].group_id for ts in kept]),
    )
    batch.advantages_BT = rows.broadcast(adv_E, batch.mask_BT)  # rows x T
    return train_step(model, optimizer, batch, cfg)
