"""The one path from episodes to training rows, with an index from each row back to its episode.

An episode trains as one row when its history is append-only (the common case: the rows are the
episodes themselves). It trains as several when its context was rewritten (one row per stretch,
each with the context the model saw; :mod:`skyrl_agent.context`), with step-wise training (one
row per turn), or when something else played it and handed over several trajectories (an external
harness's stretches: server sessions, mini-swe-agent). Either way every row keeps its episode's
reward and group, and an advantage computed per episode reaches each of its rows through
:attr:`TrainingRows.episode` (:meth:`TrainingRows.broadcast`), so each episode counts once in its
group's baseline however many rows it has.

::

    rows = training_rows(episodes, step_wise=cfg.algorithm.step_wise)
    batch = collate(rows.rows, pad_id=pad_id)
    batch.advantages_BT = rows.broadcast(episode_advantages(...), batch.mask_BT)

The native loop's update, its loss share of left-out groups (:func:`trainers.loop.kept_share`)
and :func:`trainers.episodes.train_on_episodes` all go through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from skyrl_agent.context import training_samples
from skyrl_agent.types import Trajectory

__all__ = ["TrainingRows", "training_rows", "count_rows"]


@dataclass
class TrainingRows:
    """The rows of a batch of episodes and where each came from."""

    rows: list[Trajectory]
    """The samples to collate, episode by episode in the order given."""
    episode: list[int]
    """For each row, the index of its episode in the list given."""
    turns: list[tuple[int, int]]
    """For each row, ``[first, end)`` of the episode's turns it trains (turns counted over the
    whole episode, across its stretches and, for an episode of several trajectories, across
    them in order)."""
    whole: bool
    """Every row is its episode's one trajectory as given (so ``rows`` is that list)."""

    def broadcast(self, per_episode: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
        """``per_episode[e]`` on every trained token of episode ``e``'s rows (``rows x T``)."""
        index = torch.tensor(self.episode, device=per_episode.device)
        return per_episode[index].to(mask_BT.device)[:, None] * mask_BT

    @property
    def episodes(self) -> int:
        """How many episodes the rows came from."""
        return max(self.episode) + 1 if self.episode else 0


def training_rows(
    episodes: Sequence[Trajectory] | Sequence[Sequence[Trajectory]], step_wise: bool = False
) -> TrainingRows:
    """The training rows of ``episodes``: each episode a trajectory (the native loop's) or a list
    of its trajectories (an external harness's, one per stretch of history it sent). Rows come
    episode by episode, in order; see the module docstring for when an episode gives several."""
    out_rows: list[Trajectory] = []
    owner: list[int] = []
    spans: list[tuple[int, int]] = []
    whole = True
    for e, episode in enumerate(episodes):
        trajectories = [episode] if isinstance(episode, Trajectory) else list(episode)
        whole = whole and len(trajectories) == 1
        turn = 0
        for traj in trajectories:
            rows = training_samples(traj, step_wise)
            whole = whole and len(rows) == 1 and rows[0] is traj
            for row in rows:
                n = len(row.turn_spans)
                out_rows.append(row)
                owner.append(e)
                spans.append((turn, turn + n))
                turn += n
    return TrainingRows(out_rows, owner, spans, whole)


def count_rows(episodes: Sequence[Trajectory], step_wise: bool = False) -> int:
    """How many rows :func:`training_rows` would give ``episodes`` (an append-only episode is
    its own one row, nothing built)."""
    return sum(len(training_samples(t, step_wise)) for t in episodes)
