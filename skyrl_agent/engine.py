"""The rollout engine: many episodes at once on one event loop.

Each prompt becomes ``n_samples`` episodes (a GRPO group). Every episode goes through three
stages that overlap with other episodes' generation, each with its own thread pool:

1. **set-up** (at most ``env_threads`` at once, built envs waiting for a generation slot
   included): ``skyrl_gym.make`` builds the env, then its optional ``setup()`` hook (starting a
   container, building an image) and ``init(prompt)`` run in worker threads, so a slow sandbox
   never holds a generation slot;
2. **play** (at most ``concurrency`` at once): the turns, token-level for a
   :class:`~skyrl_agent.types.Policy` (as :func:`~skyrl_agent.loop.play_episode`) or chat-level
   for a :class:`~skyrl_agent.types.ChatModel` (as
   :func:`~skyrl_agent.chat_loop.play_chat_episode`), whose ``env.step`` calls run in the thread
   pool with deadlines, while the policy serves the other episodes. A batching policy
   (``HFPolicy``) gathers the concurrent turn requests into one model call;
3. **finish** (at most ``env_threads`` at once): the env's optional ``grade()`` hook (a
   verifier or test suite; its reward is added to the last turn's), ``get_metrics()`` and
   ``close()``, after the generation slot was released.

An episode that fails (env crash, env timeout, policy error) records a
:class:`~skyrl_agent.failures.Failure` and is kept with ``masked=True``: it is counted, never
scored as reward 0. A retriable failure (a timeout, a lost connection, an infrastructure error)
is first retried up to ``max_retries`` times with the same seed; one that is not (an env bug, an
import error) is not, since it would fail the same way. Seeds derive from ``(config.seed, group,
sample)``, so a run repeats exactly with the same policy.
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from skyrl_agent._env_stages import EnvFailure, finish_env, finish_episode, may_grade, setup_and_init
from skyrl_agent._episode import Turns, is_chat_level, play_turns
from skyrl_agent._thread_pool import LoopThreadPool, run_in
from skyrl_agent.chat import ChatRenderer
from skyrl_agent.context import training_samples
from skyrl_agent.episodes import Episode, EpisodeGroup, group_episodes
from skyrl_agent.failures import Failure, FailureStage, count_failures
from skyrl_agent.loop import episode_turns
from skyrl_agent.tasks import load_tasks
from skyrl_agent.types import (
    ChatModel,
    EpisodeInfo,
    EpisodeJob,
    Policy,
    PromptItem,
    RolloutConfig,
    StopReason,
    Trajectory,
)
from skyrl_gym.errors import ConfigError

__all__ = [
    "PromptItem",
    "RolloutStats",
    "RolloutResult",
    "RolloutEngine",
    "EpisodeJob",
    "episode_jobs",
    "episode_seed",
    "load_prompts",
    "prompts_from_example",
]


def prompts_from_example(env_id: str, count: int = 1) -> list[PromptItem]:
    """``count`` copies of the env's ``example()`` set-up (for demos and smoke runs)."""
    from skyrl_gym import spec

    env_cls = spec(env_id).load()
    example = env_cls.example() if hasattr(env_cls, "example") else None
    if example is None:
        raise ConfigError(f"env {env_id!r} has no example(); pass prompts from a dataset (--prompts FILE)")
    return [
        PromptItem(
            env_id, tuple(example.prompt), dict(example.env_config), dict(example.extras), f"example-{i}"
        )
        for i in range(count)
    ]


def load_prompts(path: str | Path, env_id: str | None = None, limit: int | None = None) -> list[PromptItem]:
    """Read tasks from a JSONL or Parquet file (or a saved ``datasets.Dataset`` directory) with
    the published columns: ``prompt`` (messages or a string), ``env_class`` (or ``env_id``),
    ``reward_spec``, ``extra_info``, optional ``env_config``, ``extras`` and ``id`` (else the
    row's position: its line number minus one in JSONL). ``env_id`` overrides the rows'. See
    :mod:`skyrl_agent.tasks` for the conventions and for ``datasets.Dataset`` sources."""
    return load_tasks(path, env_id=env_id, limit=limit)


def episode_jobs(items: Sequence[PromptItem], n_samples: int) -> list[EpisodeJob]:
    """The episodes of a batch: ``n_samples`` per item, in (group, sample) order."""
    return [(g, s, item) for g, item in enumerate(items) for s in range(n_samples)]


def episode_seed(base: int, group: int, sample: int) -> int:
    """The seed of sample ``sample`` of prompt ``group`` in a run seeded ``base``."""
    return random.Random(f"{base}/{group}/{sample}").getrandbits(63)


@dataclass
class RolloutStats:
    """Counts for one batch of episodes."""

    episodes: int = 0
    """Episodes finished (masked included)."""
    masked: int = 0
    """Episodes spoiled by infrastructure failures after retries (skip them in training)."""
    env_errors: int = 0
    """Episodes that ended with ``env_error``."""
    policy_errors: int = 0
    """Episodes that ended with ``policy_error``."""
    timeouts: int = 0
    """Episodes that ended at the deadline, plus env calls that timed out."""
    truncated_turns: int = 0
    """Turns cut by ``max_tokens``."""
    truncated_episodes: int = 0
    """Episodes ended by a budget (the env's own limit, ``max_turns``, ``context_limit``,
    ``deadline``)."""
    retries: int = 0
    """Episode re-runs after retriable failures."""
    stop_reasons: dict[str, int] = field(default_factory=dict)
    """Episodes per stop reason."""
    failures: dict[str, int] = field(default_factory=dict)
    """Episodes per failure, as ``stage/kind`` (``env/ConnectionError``; ``unknown/...`` for an
    episode from a file that recorded only an error message); close failures included, though
    they do not mask."""
    mean_reward: float = 0.0
    """Mean total reward of the unmasked episodes."""
    mean_turns: float = 0.0
    """Mean turns per episode."""
    generated_tokens: int = 0
    """Tokens the policy sampled (mask 1)."""
    total_turns: int = 0
    """Turns over all episodes."""
    wall_seconds: float = 0.0
    """Wall time of the batch."""

    @classmethod
    def of(
        cls, trajectories: Sequence[Trajectory], wall_seconds: float = 0.0, retries: int = 0
    ) -> RolloutStats:
        """Count ``trajectories``."""
        reasons = Counter(str(t.stop_reason) for t in trajectories)
        good = [t for t in trajectories if not t.masked]
        failures = count_failures(trajectories)
        return cls(
            episodes=len(trajectories),
            masked=sum(t.masked for t in trajectories),
            env_errors=reasons.get(StopReason.ENV_ERROR, 0),
            policy_errors=reasons.get(StopReason.POLICY_ERROR, 0),
            timeouts=reasons.get(StopReason.DEADLINE, 0)
            + sum(n for key, n in failures.items() if key.endswith("/TimeoutError")),
            truncated_turns=sum(t.truncated_turns for t in trajectories),
            truncated_episodes=sum(
                reasons.get(r, 0)
                for r in (
                    StopReason.ENV_LIMIT,
                    StopReason.MAX_TURNS,
                    StopReason.CONTEXT_LIMIT,
                    StopReason.DEADLINE,
                )
            ),
            retries=retries,
            stop_reasons=dict(reasons),
            failures=dict(sorted(failures.items())),
            mean_reward=sum(t.reward for t in good) / len(good) if good else 0.0,
            mean_turns=sum(t.num_turns for t in trajectories) / len(trajectories) if trajectories else 0.0,
            generated_tokens=sum(t.num_generated_tokens for t in trajectories),
            total_turns=sum(t.num_turns for t in trajectories),
            wall_seconds=wall_seconds,
        )

    def table(self) -> str:
        """A short summary table for terminals."""
        rows = [
            ("episodes", f"{self.episodes}"),
            ("mean reward (unmasked)", f"{self.mean_reward:.4f}"),
            ("mean turns", f"{self.mean_turns:.2f}"),
            ("generated tokens", f"{self.generated_tokens}"),
            ("masked (infra failures)", f"{self.masked}"),
            ("env errors / policy errors", f"{self.env_errors} / {self.policy_errors}"),
            ("timeouts", f"{self.timeouts}"),
            ("truncated turns / episodes", f"{self.truncated_turns} / {self.truncated_episodes}"),
            ("retries", f"{self.retries}"),
            ("failures", ", ".join(f"{k}={v}" for k, v in self.failures.items()) or "none"),
            ("stop reasons", ", ".join(f"{k}={v}" for k, v in sorted(self.stop_reasons.items()))),
            ("wall seconds", f"{self.wall_seconds:.1f}"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@dataclass
class RolloutResult:
    """What :meth:`RolloutEngine.run` returns."""

    trajectories: list[Trajectory]
    """One per episode, ordered by (group, sample)."""
    stats: RolloutStats
    """Counts over the batch."""
    step_wise: bool = False
    """``config.step_wise`` of the run (what :attr:`step_samples` follows)."""

    @property
    def groups(self) -> list[EpisodeGroup]:
        """The episodes read as turns, one :class:`~skyrl_agent.episodes.EpisodeGroup` a prompt
        (see :mod:`skyrl_agent.episodes`), in the order of ``trajectories``."""
        return group_episodes(self.trajectories)

    @property
    def episodes(self) -> list[Episode]:
        """Each trajectory read as turns (:class:`~skyrl_agent.episodes.Episode`)."""
        return [Episode.of(t) for t in self.trajectories]

    @property
    def step_samples(self) -> list[Trajectory]:
        """One sample per turn when ``config.step_wise`` (empty otherwise), cut on each read by
        :func:`~skyrl_agent.context.training_samples`. Kept for callers from before the trainer
        cut its own rows (``trainers.rows.training_rows``); the engine no longer cuts them."""
        if not self.step_wise:
            return []
        return [s for t in self.trajectories for s in training_samples(t, step_wise=True)]


EnvFactory = Callable[[PromptItem], Any]


def _make_env(item: PromptItem) -> Any:
    import skyrl_gym

    return skyrl_gym.make(item.env_id, env_config=dict(item.env_config), extras=dict(item.extras))


class RolloutEngine:
    """Runs batches of episodes with bounded concurrency.

    Args:
        policy: any :class:`~skyrl_agent.types.Policy`, or a :class:`~skyrl_agent.types.ChatModel`
            (chat-level episodes without token ids, for evaluation); anything else raises
            ``ConfigError``.
        config: budgets, sampling, concurrency, seeds.
        renderer: chat rendering (default: the policy tokenizer's own template).
        env_factory: builds the env of a row (default ``skyrl_gym.make``); runs in a thread.
        progress: print a progress line to ``progress_stream`` every ``progress_every_s``;
            ``None`` prints when the stream is a terminal.
        gc_gen0_threshold: while a batch runs, Python's first-generation GC threshold is raised
            to this (and restored afterwards): thousands of live episodes otherwise make the
            collector cost about a third of the loop's CPU time. ``None`` leaves the GC alone.
    """

    def __init__(
        self,
        policy: Policy | ChatModel,
        config: RolloutConfig,
        *,
        renderer: ChatRenderer | None = None,
        env_factory: EnvFactory | None = None,
        progress: bool | None = None,
        progress_stream: TextIO | None = None,
        progress_every_s: float = 5.0,
        gc_gen0_threshold: int | None = 50_000,
    ) -> None:
        self.policy = policy
        self.config = config
        # a ChatModel (messages in, text out) plays chat-level episodes: evaluation only
        self.chat_level = is_chat_level(policy)
        self.renderer = renderer or (None if self.chat_level else ChatRenderer(policy.tokenizer))
        self.env_factory = env_factory or _make_env
        self.progress_stream = progress_stream or sys.stderr
        self.progress = progress if progress is not None else self.progress_stream.isatty()
        self.progress_every_s = progress_every_s
        self.gc_gen0_threshold = gc_gen0_threshold

    def run_sync(self, items: Sequence[PromptItem], first_group: int = 0) -> RolloutResult:
        """:meth:`run` from synchronous code."""
        return asyncio.run(self.run(items, first_group))

    async def run(self, items: Sequence[PromptItem], first_group: int = 0) -> RolloutResult:
        """Play ``n_samples`` episodes of every item; return them with the batch's counts. Item
        ``g``'s episodes are group ``first_group + g`` (:meth:`run_jobs`)."""
        return await self.run_jobs(episode_jobs(items, self.config.n_samples), first_group)

    async def run_jobs(self, jobs: Sequence[EpisodeJob], first_group: int = 0) -> RolloutResult:
        """Play the given episodes ``(group, sample, item)`` (a shard of a batch: the Ray engine
        gives each worker some groups); seeds derive from ``(config.seed, group, sample)``, so
        an episode is the same whichever process plays it. The episodes' ``group_id`` is
        ``first_group + group``: where this batch's groups start in a larger one (a rank's shard
        of a step, a step's later sampling round), given when the episodes are made rather than
        added afterwards; the seeds do not depend on it."""
        old_threshold = gc.get_threshold()
        if self.gc_gen0_threshold is not None:
            gc.set_threshold(max(self.gc_gen0_threshold, old_threshold[0]), *old_threshold[1:])
        try:
            return await self._run(jobs, first_group)
        finally:
            gc.set_threshold(*old_threshold)

    async def _run(self, jobs: Sequence[EpisodeJob], first_group: int) -> RolloutResult:
        cfg = self.config
        start = time.monotonic()
        stages = _Stages.open(cfg)
        done: list[Trajectory] = []
        retries = 0
        total = len(jobs)

        async def one(group: int, sample: int, item: PromptItem) -> Trajectory:
            nonlocal retries
            info = EpisodeInfo(
                prompt_id=item.prompt_id or str(group),
                group_id=first_group + group,
                sample_index=sample,
                env_id=item.env_id,
                seed=episode_seed(cfg.seed, group, sample),
            )
            traj: Trajectory | None = None
            for attempt in range(cfg.max_retries + 1):
                if attempt:
                    retries += 1
                traj = await self._episode(item, info, stages)
                if not traj.masked or (traj.failure is not None and not traj.failure.retriable):
                    break
            assert traj is not None
            done.append(traj)
            return traj

        reporter = asyncio.create_task(self._report(done, total, start)) if self.progress else None
        try:
            tasks = [asyncio.create_task(one(g, s, item)) for g, s, item in jobs]
            trajs = await asyncio.gather(*tasks)
        finally:
            if reporter is not None:
                reporter.cancel()
            stages.close()
        wall = time.monotonic() - start
        trajs = sorted(trajs, key=lambda t: (t.group_id, t.sample_index))
        stats = RolloutStats.of(trajs, wall, retries)
        if self.progress:
            self._print_progress(len(done), total, start, done, final=True)
        return RolloutResult(trajs, stats, step_wise=cfg.step_wise)

    async def _episode(
        self,
        item: PromptItem,
        info: EpisodeInfo,
        stages: _Stages,
    ) -> Trajectory:
        cfg = self.config
        # set-up stage: build, seed, setup() and init() without a generation slot. The set-up
        # slot is kept until a generation slot is free, so at most env_threads envs are built
        # ahead of the players (built envs hold containers, connections, memory).
        async with stages.setup_slots:
            t0 = time.monotonic()
            made = run_in(stages.setup_pool, self.env_factory, item)
            try:
                env = await asyncio.wait_for(asyncio.shield(made), cfg.env_setup_timeout_s)
                if hasattr(env, "seed"):
                    env.seed(info.seed)
            except Exception as exc:  # noqa: BLE001 - a set-up failure is recorded: masked
                if isinstance(exc, TimeoutError):
                    made.add_done_callback(_close_late_env)  # the thread finishes later: close then
                    failure = Failure.timeout(
                        FailureStage.SETUP, f"env set-up took longer than {cfg.env_setup_timeout_s}s"
                    )
                else:
                    failure = Failure.of(exc, FailureStage.SETUP, "env set-up")
                return _failed(info, failure, time.monotonic() - t0)
            try:
                initial, setup_s = await setup_and_init(
                    env, item.prompt, config=cfg, executor=stages.setup_pool
                )
            except EnvFailure as failure:
                traj = _failed(info, failure.failure or failure.error, time.monotonic() - t0)
                if not failure.abandoned:  # a call still running in its thread keeps the env
                    await finish_env(env, stages.finish_pool, close=True)
                return traj
            try:
                await stages.play_slots.acquire()
            except BaseException:  # cancelled while waiting: close the built env in the background
                stages.finish_pool.submit(env.close)
                raise
        # play stage: the turns, holding a generation slot
        try:
            traj, env_busy = await play_turns(
                self._turns(info),
                env,
                item.prompt,
                config=cfg,
                info=info,
                executor=stages.step_pool,
                initial=initial,
            )
        finally:
            stages.play_slots.release()
        traj.env_seconds += setup_s
        # finish stage: grade() (a verifier), metrics and close, without a generation slot
        async with stages.finish_slots:
            return await finish_episode(
                env, traj, config=cfg, executor=stages.finish_pool, grade=may_grade(traj, env_busy)
            )

    def _turns(self, info: EpisodeInfo) -> Turns:
        """The turns of one episode: chat-level for a ``ChatModel``, token-level for a ``Policy``."""
        return episode_turns(self.policy, None if self.chat_level else self.renderer, self.config, info)

    async def _report(self, done: list[Trajectory], total: int, start: float) -> None:
        while True:
            await asyncio.sleep(self.progress_every_s)
            self._print_progress(len(done), total, start, done)

    def _print_progress(
        self, n: int, total: int, start: float, done: Sequence[Trajectory], final: bool = False
    ) -> None:
        elapsed = time.monotonic() - start
        rate = n / elapsed if elapsed > 0 else 0.0
        good = [t.reward for t in done if not t.masked]
        reward = sum(good) / len(good) if good else float("nan")
        eta = (total - n) / rate if rate > 0 else float("inf")
        masked = sum(t.masked for t in done)
        tail = "done" if final else f"eta {eta:.0f}s"
        print(
            f"[rollout] {n}/{total} episodes  {rate:.2f} ep/s  reward {reward:.3f}  masked {masked}  {tail}",
            file=self.progress_stream,
            flush=True,
        )


@dataclass
class _Stages:
    """The slots and thread pools of one batch. Each stage has its own pool, so a slow
    ``setup()`` or ``grade()`` never delays the ``step`` calls of episodes that are playing."""

    setup_slots: asyncio.Semaphore
    play_slots: asyncio.Semaphore
    finish_slots: asyncio.Semaphore
    setup_pool: LoopThreadPool
    step_pool: LoopThreadPool
    finish_pool: LoopThreadPool

    @classmethod
    def open(cls, cfg: RolloutConfig) -> _Stages:
        loop = asyncio.get_running_loop()
        n = cfg.env_threads
        return cls(
            asyncio.Semaphore(n),
            asyncio.Semaphore(cfg.concurrency),
            asyncio.Semaphore(n),
            LoopThreadPool(loop, n, "skyrl-setup"),
            LoopThreadPool(loop, n, "skyrl-env"),
            LoopThreadPool(loop, n, "skyrl-finish"),
        )

    def close(self) -> None:
        for p in (self.setup_pool, self.step_pool, self.finish_pool):
            p.close()


def _close_late_env(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        try:
            fut.result().close()
        except Exception:  # noqa: BLE001 - best effort for an abandoned env
            pass


def _failed(info: EpisodeInfo, error: Failure | str, env_seconds: float) -> Trajectory:
    return Trajectory.failed(
        error,
        prompt_id=info.prompt_id,
        group_id=info.group_id,
        sample_index=info.sample_index,
        env_id=info.env_id,
        env_seconds=env_seconds,
    )
