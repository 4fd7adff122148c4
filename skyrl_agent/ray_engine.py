"""The rollout engine fanned out over a Ray cluster (the ``ray`` extra).

Each Ray worker (an actor) builds its own policy with ``policy_factory`` (a client of a shared
OpenAI-compatible server, or a copy of a local model), runs envs in its own process, and plays a
shard of the batch with a local :class:`~skyrl_agent.engine.RolloutEngine`. Whole GRPO groups go
to one worker (so a batching policy shares the group's prompt prefix). Episode seeds derive from
``(config.seed, group, sample)`` exactly as in the local engine, so with a deterministic policy
the trajectories are the same whichever worker plays them::

    from functools import partial
    from skyrl_agent.policies.openai_compat import OpenAICompatPolicy
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine

    factory = partial(OpenAICompatPolicy, "http://10.0.0.5:8000/v1", "m", tokenizer)
    with RayRolloutEngine(factory, config, RayConfig(address="auto", num_workers=8)) as engine:
        result = engine.run_sync(items)

Envs registered at run time in the driver (``skyrl_gym.register``) are registered again in
each worker from their specs; their entry points must be importable there (a ``module:Class``
string, or a class of an importable module). ``RayConfig.runtime_env`` ships code and
environment variables to the workers of a remote cluster.

A worker that dies (a crash, a lost node) is an infrastructure failure: its episodes come back
masked with the error, and the next run starts a new worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_agent.context import training_samples
from skyrl_agent.engine import (
    EnvFactory,
    EpisodeJob,
    PromptItem,
    RolloutEngine,
    RolloutResult,
    RolloutStats,
    episode_jobs,
    is_chat_level,
)
from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.types import RolloutConfig, Trajectory

__all__ = ["RayConfig", "RayRolloutEngine"]

#: Builds the policy inside a worker process (must pickle: a module-level function or a
#: ``functools.partial`` of one).
PolicyFactory = Callable[[], Any]


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide to fan out (pickles; builds nothing)."""

    address: str | None = None
    """Ray cluster address (``"auto"``, ``"ray://host:10001"``); None starts a local cluster when
    Ray is not initialized yet (an already initialized Ray is always used as is)."""
    num_workers: int = 2
    """Worker actors; each plays ``ceil(concurrency / num_workers)`` episodes at once."""
    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each worker."""
    num_gpus_per_worker: float = 0.0
    """GPUs Ray reserves for each worker (a local model copy on GPU)."""
    runtime_env: dict[str, Any] = field(default_factory=dict)
    """Ray ``runtime_env`` of the workers (``working_dir``, ``env_vars``, ``pip``)."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if self.num_workers < 1:
            raise ConfigError(f"RayConfig.num_workers must be >= 1, got {self.num_workers}")
        if self.num_cpus_per_worker < 0 or self.num_gpus_per_worker < 0:
            raise ConfigError("RayConfig resources per worker must be >= 0")


class _Worker:
    """One Ray actor: a policy, registered envs and a local engine."""

    def __init__(
        self,
        policy_factory: PolicyFactory,
        config: RolloutConfig,
        chat_template: str | None,
        env_factory: EnvFactory | None,
        specs: Sequence[Any],
    ) -> None:
        import skyrl_gym
        from skyrl_agent.chat import ChatRenderer

        for spec in specs:  # envs the driver registered at run time
            if spec.id not in skyrl_gym.registration.registry:
                skyrl_gym.register(
                    spec.id, spec.entry_point, spec.kwargs, description=spec.description, source=spec.source
                )
        self.policy = policy_factory()
        renderer = None if is_chat_level(self.policy) else ChatRenderer(self.policy.tokenizer, chat_template)
        self.engine = RolloutEngine(
            self.policy, config, renderer=renderer, env_factory=env_factory, progress=False
        )

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], int]:
        result = asyncio.run(self.engine.run_jobs(jobs))
        return result.trajectories, result.stats.retries

    def close(self) -> None:
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()


class RayRolloutEngine:
    """:class:`~skyrl_agent.engine.RolloutEngine` over Ray workers; same ``run``/``run_sync``.

    Args:
        policy_factory: builds the policy in each worker (see :data:`PolicyFactory`).
        config: the rollout config; ``concurrency`` is split over the workers.
        ray_config: cluster address and workers.
        chat_template: chat template of the workers' renderers (None: the tokenizer's own).
        env_factory: builds an env from a row in the workers (default ``skyrl_gym.make``).
    """

    def __init__(
        self,
        policy_factory: PolicyFactory,
        config: RolloutConfig,
        ray_config: RayConfig | None = None,
        *,
        chat_template: str | None = None,
        env_factory: EnvFactory | None = None,
    ) -> None:
        self.policy_factory = policy_factory
        self.config = config
        self.ray_config = ray_config or RayConfig()
        self.chat_template = chat_template
        self.env_factory = env_factory
        self._actors: list[Any] = []
        self._specs: dict[str, Any] = {}

    # ------------------------------------------------------------------ workers
    def _ray(self) -> Any:
        from skyrl_gym.errors import require

        ray: Any = require("ray", "ray", "fanning rollouts out over a Ray cluster")
        if not ray.is_initialized():
            ray.init(address=self.ray_config.address, runtime_env=self.ray_config.runtime_env or None)
        return ray

    def _worker_config(self) -> RolloutConfig:
        per_worker = max(1, math.ceil(self.config.concurrency / self.ray_config.num_workers))
        return dataclasses.replace(self.config, concurrency=per_worker)

    def _ensure_actors(self, items: Sequence[PromptItem]) -> list[Any]:
        import skyrl_gym

        ray = self._ray()
        needed = {}
        if self.env_factory is None:
            for env_id in {item.env_id for item in items}:
                needed[env_id] = skyrl_gym.spec(env_id)  # a missing id fails here, in the driver
        if self._actors and not set(needed) <= set(self._specs):
            self.close()  # new run-time envs: the workers must register them
        self._specs.update(needed)
        if not self._actors:
            remote = ray.remote(_Worker).options(
                num_cpus=self.ray_config.num_cpus_per_worker,
                num_gpus=self.ray_config.num_gpus_per_worker,
                runtime_env=self.ray_config.runtime_env or None,
            )
            specs = list(self._specs.values())
            self._actors = [
                remote.remote(
                    self.policy_factory, self._worker_config(), self.chat_template, self.env_factory, specs
                )
                for _ in range(self.ray_config.num_workers)
            ]
        return self._actors

    def close(self) -> None:
        """Stop the workers (idempotent). The Ray cluster itself is left running."""
        if not self._actors:
            return
        import ray

        for actor in self._actors:
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead worker needs no closing
                pass
            ray.kill(actor)
        self._actors = []

    def __enter__(self) -> RayRolloutEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ runs
    def run_sync(self, items: Sequence[PromptItem]) -> RolloutResult:
        """:meth:`run` from synchronous code."""
        return asyncio.run(self.run(items))

    async def run(self, items: Sequence[PromptItem]) -> RolloutResult:
        """Play ``n_samples`` episodes of every item over the workers; same result as the local
        engine's (trajectories ordered by (group, sample), the batch's counts)."""
        start = time.monotonic()
        jobs = episode_jobs(items, self.config.n_samples)
        actors = self._ensure_actors(items)
        shards: list[list[EpisodeJob]] = [[] for _ in actors]
        for job in jobs:  # whole groups per worker, groups dealt round robin
            shards[job[0] % len(actors)].append(job)
        busy = [(actor, shard) for actor, shard in zip(actors, shards, strict=True) if shard]
        outcomes = await asyncio.gather(
            *(self._run_shard(actor, shard) for actor, shard in busy), return_exceptions=True
        )
        trajs: list[Trajectory] = []
        retries = 0
        lost = False
        for (_, shard), outcome in zip(busy, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                lost = True
                failure = Failure(  # the worker, not the episode: another worker may play it
                    FailureStage.SETUP, type(outcome).__name__, f"{outcome} (Ray worker lost)", retriable=True
                )
                trajs += [_lost(job, failure) for job in shard]
            else:
                trajs += outcome[0]
                retries += outcome[1]
        if lost:
            self.close()  # the next run starts fresh workers
        trajs.sort(key=lambda t: (t.group_id, t.sample_index))
        stats = RolloutStats.of(trajs, time.monotonic() - start, retries)
        steps = (
            [s for t in trajs for s in training_samples(t, step_wise=True)] if self.config.step_wise else []
        )
        return RolloutResult(trajs, stats, steps)

    async def _run_shard(self, actor: Any, shard: list[EpisodeJob]) -> tuple[list[Trajectory], int]:
        return await actor.run.remote(shard)


def _lost(job: EpisodeJob, error: Failure) -> Trajectory:
    group, sample, item = job
    return Trajectory.failed(
        error, prompt_id=item.prompt_id or str(group), group_id=group, sample_index=sample, env_id=item.env_id
    )
