"""Episodes as turns: what a recorded episode was, turn by turn, and a prompt's group of them.

A :class:`~skyrl_agent.types.Trajectory` is an episode as it is stored, sent and trained: flat
token ids with a loss mask, the turns' spans in them, one :class:`~skyrl_agent.types.Turn`
record per turn the env answered, and the stretches before each context rewrite. An
:class:`Episode` reads that record as turns, with nothing copied and nothing recomputed::

    for group in result.groups:                 # RolloutResult.groups: one EpisodeGroup a prompt
        for ep in group.episodes:
            for turn in ep.turns:
                turn.observation_ids            # what the policy read since its previous turn
                turn.sampled_ids, turn.logprobs # what it sampled, as the sampler scored it
                turn.reward, turn.record        # the env's answer: done, truncated, metadata, timings
            ep.outcome.stop_reason, ep.outcome.failure, ep.outcome.grade_reward, ep.outcome.metrics

- A turn's **observation** is the tokens the policy read since it last sampled: the prompt for
  the first turn of a stretch (the first prompt, or the rewritten history after a context
  rewrite), else the observation and template tokens between the previous turn and this one.
- A turn the policy sampled but the env never answered (the env failed on it, the deadline
  passed during its step) has ``reward`` None and no record.
- Chat-level episodes (a :class:`~skyrl_agent.types.ChatModel`) have no token ids: their turns
  have empty ids and their env records.
- Episodes recorded before turn records were (files from before 2026-12-06) or played outside
  the runtime (the server's sessions) have ``record`` None on every turn; their rewards come
  from ``turn_rewards``.

The view is built on demand (:meth:`Episode.of`), so every file written by any version of the
runtime reads as episodes; the trajectory stays the one stored form (decision 0034).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skyrl_agent.context import history_stretches
from skyrl_agent.failures import Failure
from skyrl_agent.types import StopReason, Trajectory, Turn

__all__ = ["Episode", "EpisodeGroup", "EpisodeTurn", "Outcome", "group_episodes"]


@dataclass(frozen=True)
class EpisodeTurn:
    """One turn of an episode: what the policy read and sampled, and what the env answered."""

    index: int
    """The turn's place in the episode (0-based, across every stretch)."""
    stretch: int
    """Which stretch of history it belongs to: 0 before the first context rewrite."""
    span: tuple[int, int] | None
    """``[start, end)`` of its sampled tokens in its stretch's response ids; None for a
    chat-level turn (no ids)."""
    observation_ids: list[int]
    """What the policy read since its previous turn (see the module docstring)."""
    sampled_ids: list[int]
    """What the policy sampled."""
    logprobs: list[float] | None
    """The sampler's logprob of each sampled token (temperature 1), or None."""
    reward: float | None
    """The env's reward for the turn (the last turn's includes ``grade()``'s); None when the env
    never answered it."""
    record: Turn | None
    """The env's step output and the turn's timings; None where the episode has no turn records
    (old files, externally played episodes) or the env never answered."""

    @property
    def done(self) -> bool:
        """Whether the env said ``done`` on this turn (False without a record)."""
        return self.record is not None and self.record.done

    @property
    def metadata(self) -> dict[str, Any]:
        """The env's step metadata (empty without a record)."""
        return self.record.metadata if self.record is not None else {}


@dataclass(frozen=True)
class Outcome:
    """How an episode ended."""

    stop_reason: StopReason
    """Why it ended."""
    reward: float
    """Its total reward (the sum of its turns' rewards)."""
    grade_reward: float | None
    """What the env's ``grade()`` returned (already in the last turn's reward); None when there
    was no grader or it did not run."""
    failure: Failure | None
    """What went wrong, as a record (None for a success or for files holding only ``error``)."""
    error: str | None
    """The failure's text (the only trace of it in files from before failures were records)."""
    masked: bool
    """An infrastructure failure spoiled it: it never trains."""
    metrics: dict[str, Any]
    """``env.get_metrics()`` at its end."""


@dataclass(frozen=True)
class Episode:
    """One episode read as turns (see the module docstring); ``trajectory`` is the record."""

    trajectory: Trajectory
    """The stored form: what trains, saves and goes over the wire."""
    prompt_ids: list[int]
    """The first prompt's ids (before any rewrite)."""
    turns: tuple[EpisodeTurn, ...]
    """Every turn, in order, across the stretches."""
    outcome: Outcome
    stretches: int
    """How many stretches of history it has (1 + the context rewrites)."""

    @classmethod
    def of(cls, traj: Trajectory) -> Episode:
        """``traj`` read as turns."""
        stretches = history_stretches(traj)
        records = traj.turns
        turns: list[EpisodeTurn] = []
        for s, seg in enumerate(stretches):
            previous_end: int | None = None
            for start, end in seg.turn_spans:
                start, end = int(start), int(end)
                seen = list(seg.prompt_ids) if previous_end is None else seg.response_ids[previous_end:start]
                i = len(turns)
                turns.append(
                    EpisodeTurn(
                        index=i,
                        stretch=s,
                        span=(start, end),
                        observation_ids=seen,
                        sampled_ids=seg.response_ids[start:end],
                        logprobs=None if seg.rollout_logprobs is None else seg.rollout_logprobs[start:end],
                        reward=float(traj.turn_rewards[i]) if i < len(traj.turn_rewards) else None,
                        record=records[i] if i < len(records) else None,
                    )
                )
                previous_end = end
        # turns the env answered without ids: a chat-level episode's
        for i in range(len(turns), len(traj.turn_rewards)):
            turns.append(
                EpisodeTurn(
                    index=i,
                    stretch=len(stretches) - 1,
                    span=None,
                    observation_ids=[],
                    sampled_ids=[],
                    logprobs=None,
                    reward=float(traj.turn_rewards[i]),
                    record=records[i] if i < len(records) else None,
                )
            )
        outcome = Outcome(
            stop_reason=traj.stop_reason,
            reward=traj.reward,
            grade_reward=traj.grade_reward,
            failure=traj.failure,
            error=traj.error,
            masked=traj.masked,
            metrics=traj.env_metrics,
        )
        first = traj.segments[0].prompt_ids if traj.segments else traj.prompt_ids
        return cls(traj, list(first), tuple(turns), outcome, len(stretches))

    # ------------------------------------------------------------------ the record's ids
    @property
    def prompt_id(self) -> str:
        return self.trajectory.prompt_id

    @property
    def group_id(self) -> int:
        return self.trajectory.group_id

    @property
    def sample_index(self) -> int:
        return self.trajectory.sample_index

    @property
    def env_id(self) -> str:
        return self.trajectory.env_id

    @property
    def policy_version(self) -> int | None:
        return self.trajectory.policy_version

    @property
    def answered_turns(self) -> list[EpisodeTurn]:
        """The turns the env answered (every turn but one the episode failed or stopped on)."""
        return [t for t in self.turns if t.reward is not None]


@dataclass(frozen=True)
class EpisodeGroup:
    """One prompt's episodes: what a group-relative estimator compares."""

    group_id: int
    prompt_id: str
    episodes: tuple[Episode, ...]

    @property
    def live(self) -> list[Episode]:
        """The episodes that may train (not masked)."""
        return [e for e in self.episodes if not e.outcome.masked]

    @property
    def rewards(self) -> list[float]:
        """The live episodes' total rewards, in order."""
        return [e.outcome.reward for e in self.live]


def group_episodes(episodes: Iterable[Trajectory | Episode]) -> list[EpisodeGroup]:
    """``episodes`` by group id, groups in the order their first episode comes and episodes in
    the order given (the engines return them by group and sample). An episode's group is its
    ``group_id``: episodes of one prompt share it, so two rows of the same prompt id drawn
    twice in a batch are two groups."""
    by_id: dict[int, list[Episode]] = {}
    for item in episodes:
        ep = item if isinstance(item, Episode) else Episode.of(item)
        by_id.setdefault(ep.group_id, []).append(ep)
    return [EpisodeGroup(g, members[0].prompt_id, tuple(members)) for g, members in by_id.items()]
