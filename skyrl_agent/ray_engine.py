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

The workers are placed by a Ray placement group (one bundle of ``num_cpus_per_worker``,
``num_gpus_per_worker`` and ``memory_per_worker_gb`` per worker); a group the cluster cannot
hold fails within ``placement_timeout_s`` with an error naming what is missing, instead of
waiting forever.

Weights: :meth:`RayRolloutEngine.update_weights` puts a state dict in Ray's object store once
and gives it the next version; every later shard call carries ``(version, reference)``, and a
worker whose weights are older loads them before it plays, so a restarted worker catches up by
itself. Every episode records the version it was sampled with (``Trajectory.policy_version``).

Faults: with ``max_restarts`` above 0 Ray restarts a worker whose process or node was lost
(actor restarts, in another node's bundle when its node is gone) and the engine plays the lost
shard once more on it, counting the worker and the episodes (:class:`WorkerCounts`); the batch
keeps exactly one episode per (group, sample), which is checked. A worker that cannot be
restarted (or ``max_restarts=0``) is an infrastructure failure: its episodes come back masked
with the error, and the next run starts new workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

__all__ = ["RayConfig", "RayRolloutEngine", "WorkerCounts", "in_bundle", "place_bundles", "register_specs"]

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
    memory_per_worker_gb: float = 0.0
    """Memory Ray reserves for each worker, in GB (0: none reserved)."""
    max_restarts: int = 0
    """How often Ray may restart a lost worker (its process killed, its node gone); a shard lost
    with it is played once more on the restarted worker. 0: its episodes are masked instead."""
    placement_timeout_s: float = 60.0
    """How long to wait for the cluster to place the workers' bundles before failing, and for a
    lost worker to come back before its episodes are masked."""
    placement_strategy: str = "SPREAD"
    """Ray's placement group strategy: ``SPREAD`` (over nodes where it can), ``PACK``,
    ``STRICT_SPREAD`` (one worker per node) or ``STRICT_PACK``."""

    placement_name: str = ""
    """A name for the workers' placement group (Ray's ``name``), so that another process can
    free it when the one that made it died; empty: unnamed."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if self.num_workers < 1:
            raise ConfigError(f"RayConfig.num_workers must be >= 1, got {self.num_workers}")
        if self.num_cpus_per_worker < 0 or self.num_gpus_per_worker < 0 or self.memory_per_worker_gb < 0:
            raise ConfigError("RayConfig resources per worker must be >= 0")
        if self.max_restarts < 0:
            raise ConfigError(f"RayConfig.max_restarts must be >= 0, got {self.max_restarts}")
        if self.placement_timeout_s <= 0:
            raise ConfigError(f"RayConfig.placement_timeout_s must be > 0, got {self.placement_timeout_s}")
        strategies = ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK")
        if self.placement_strategy not in strategies:
            raise ConfigError(
                f"RayConfig.placement_strategy must be one of {', '.join(strategies)}, "
                f"got {self.placement_strategy!r}"
            )

    def bundle(self) -> dict[str, float]:
        """One worker's resources as a placement group bundle (Ray's names; zeros left out)."""
        wanted = {
            "CPU": self.num_cpus_per_worker,
            "GPU": self.num_gpus_per_worker,
            "memory": self.memory_per_worker_gb * 1e9,
        }
        return {k: v for k, v in wanted.items() if v > 0}


@dataclass
class WorkerCounts:
    """What the workers did, summed over an engine's runs (the trainer logs it each step)."""

    workers_restarted: int = 0
    """Workers Ray restarted after their process or node was lost."""
    episodes_replayed: int = 0
    """Episodes of lost shards played again on a restarted worker."""
    episodes_lost: int = 0
    """Episodes masked because their worker was lost for good."""
    weight_syncs: int = 0
    """Times a worker loaded newer weights."""
    sync_bytes: int = 0
    """Bytes of the last weights a worker loaded."""
    sync_seconds: float = 0.0
    """Seconds the slowest worker took to load the last weights (fetch and copy)."""
    put_seconds: float = 0.0
    """Seconds the last :meth:`RayRolloutEngine.update_weights` took to put them in the object store."""
    episodes_by_worker: dict[int, int] = field(default_factory=dict)
    """Episodes each worker (by index) played."""

    def as_metrics(self) -> dict[str, float]:
        """Flat numbers for a metrics log (``ray_`` names)."""
        return {
            "ray_workers_restarted": self.workers_restarted,
            "ray_episodes_replayed": self.episodes_replayed,
            "ray_episodes_lost": self.episodes_lost,
            "ray_weight_syncs": self.weight_syncs,
            "ray_sync_bytes": self.sync_bytes,
            "ray_sync_seconds": self.sync_seconds,
            "ray_put_seconds": self.put_seconds,
        }


@dataclass
class _ShardReport:
    """What one worker's call returns."""

    trajectories: list[Trajectory]
    retries: int
    restarted: bool
    """The first call this worker served since Ray restarted it."""
    synced: bool
    sync_bytes: int
    sync_seconds: float


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
        from skyrl_agent.chat import ChatRenderer

        register_specs(specs)  # envs the driver registered at run time
        self.policy = policy_factory()
        renderer = None if is_chat_level(self.policy) else ChatRenderer(self.policy.tokenizer, chat_template)
        self.engine = RolloutEngine(
            self.policy, config, renderer=renderer, env_factory=env_factory, progress=False
        )
        self.version: int | None = None
        self.weights_ref: str | None = None
        self.reported_restart = False

    def run(
        self,
        jobs: list[EpisodeJob],
        config: RolloutConfig | None = None,
        weights: tuple[int, list[Any]] | None = None,
        first_group: int = 0,
    ) -> _ShardReport:
        """Play ``jobs`` with ``config`` (None: the one it was built with), after loading
        ``weights`` (``(version, [object ref])``) unless that object is the one it loaded last;
        its episodes record the version, and their groups start at ``first_group``."""
        import ray

        synced, nbytes, seconds = False, 0, 0.0
        if weights is not None and weights[1][0].hex() != self.weights_ref:
            start = time.perf_counter()
            state = {k: _tensor(v) for k, v in ray.get(weights[1][0]).items()}
            update = getattr(self.policy, "update_weights", None)
            if update is None:
                from skyrl_gym.errors import ConfigError

                raise ConfigError(
                    f"{type(self.policy).__name__} has no update_weights: its weights cannot be synced"
                )
            update(state)
            synced, self.weights_ref = True, weights[1][0].hex()
            nbytes = sum(int(t.numel()) * t.element_size() for t in state.values())
            seconds = time.perf_counter() - start
        if weights is not None:
            self.version = weights[0]
        if config is not None:
            self.engine.config = config
        result = asyncio.run(self.engine.run_jobs(jobs, first_group))
        for traj in result.trajectories:
            traj.policy_version = self.version
        restarted = (
            bool(ray.get_runtime_context().was_current_actor_reconstructed) and not self.reported_restart
        )
        self.reported_restart = True
        return _ShardReport(result.trajectories, result.stats.retries, restarted, synced, nbytes, seconds)

    def close(self) -> None:
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()


class RayRolloutEngine:
    """:class:`~skyrl_agent.engine.RolloutEngine` over Ray workers; same ``run``/``run_sync``.

    Args:
        policy_factory: builds the policy in each worker (see :data:`PolicyFactory`).
        config: the rollout config; ``concurrency`` is split over the workers.
        ray_config: cluster address, workers, their resources and restarts.
        chat_template: chat template of the workers' renderers (None: the tokenizer's own).
        env_factory: builds an env from a row in the workers (default ``skyrl_gym.make``).

    ``counts`` (:class:`WorkerCounts`) sums what the workers did over the engine's runs. Runs
    may be called from several threads (the trainer's producer and its evaluation).
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
        self.counts = WorkerCounts()
        self._actors: list[Any] = []
        self._group: Any = None
        self._specs: dict[str, Any] = {}
        self._weights: tuple[int, list[Any]] | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ workers
    def _ray(self) -> Any:
        from skyrl_gym.errors import require

        ray: Any = require("ray", "ray", "fanning rollouts out over a Ray cluster")
        if not ray.is_initialized():
            ray.init(address=self.ray_config.address, runtime_env=self.ray_config.runtime_env or None)
        return ray

    def _worker_config(self, config: RolloutConfig | None = None) -> RolloutConfig:
        config = config or self.config
        per_worker = max(1, math.ceil(config.concurrency / self.ray_config.num_workers))
        return dataclasses.replace(config, concurrency=per_worker)

    def _place(self, ray: Any) -> Any:
        """A placement group with one bundle per worker, ready (None when a worker reserves
        nothing); raises ``ConfigError`` naming what is missing when the cluster cannot hold it."""
        rc = self.ray_config
        bundle = rc.bundle()
        if not bundle:
            return None
        return place_bundles(
            ray,
            rc.num_workers,
            bundle,
            strategy=rc.placement_strategy,
            timeout_s=rc.placement_timeout_s,
            what="rollout workers",
            name=rc.placement_name,
            advice="Ask for less per worker (--ray-cpus-per-worker, --ray-gpus-per-worker, "
            "--ray-memory-per-worker-gb), fewer workers (--ray-workers)",
        )

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
            rc = self.ray_config
            self._group = self._place(ray)
            specs = list(self._specs.values())
            for index in range(rc.num_workers):
                remote = ray.remote(_Worker).options(
                    num_cpus=rc.num_cpus_per_worker,
                    num_gpus=rc.num_gpus_per_worker,
                    memory=rc.memory_per_worker_gb * 1e9 or None,
                    max_restarts=rc.max_restarts,
                    runtime_env=rc.runtime_env or None,
                    scheduling_strategy=in_bundle(self._group, index),
                )
                self._actors.append(
                    remote.remote(
                        self.policy_factory,
                        self._worker_config(),
                        self.chat_template,
                        self.env_factory,
                        specs,
                    )
                )
        return list(self._actors)

    def update_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Put ``state_dict`` (tensors named as the workers' models name theirs) in the object
        store as ``version`` (None: one more than the last); each worker loads it before its next
        shard (once per object: a relabelled version is not loaded again), and its episodes
        record the version. Returns the version."""
        ray = self._ray()
        start = time.perf_counter()
        ref = ray.put({k: _shareable(v) for k, v in state_dict.items()})
        with self._lock:
            if version is None:
                version = 1 + (self._weights[0] if self._weights is not None else 0)
            self._weights = (version, [ref])  # in a list: Ray passes it to the workers unresolved
            self.counts.put_seconds = time.perf_counter() - start
        return version

    def relabel(self, version: int) -> None:
        """The weights given last are also ``version`` (an update that changed nothing): later
        episodes record it, and no worker loads anything again."""
        with self._lock:
            if self._weights is None:
                raise RuntimeError("relabel: no weights were given to the workers yet")
            self._weights = (version, self._weights[1])

    @property
    def weights_version(self) -> int | None:
        """The version of the last weights given (None: the workers keep the ones they built)."""
        return self._weights[0] if self._weights is not None else None

    def close(self) -> None:
        """Stop the workers and free their placement group (idempotent). The Ray cluster itself
        is left running."""
        with self._lock:
            actors, group = self._actors, self._group
            self._actors, self._group = [], None
        if not actors and group is None:
            return
        import ray

        for actor in actors:
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead worker needs no closing
                pass
            ray.kill(actor, no_restart=True)
        if group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)

    def __enter__(self) -> RayRolloutEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ runs
    def run_sync(
        self, items: Sequence[PromptItem], config: RolloutConfig | None = None, first_group: int = 0
    ) -> RolloutResult:
        """:meth:`run` from synchronous code."""
        return asyncio.run(self.run(items, config, first_group))

    async def run(
        self, items: Sequence[PromptItem], config: RolloutConfig | None = None, first_group: int = 0
    ) -> RolloutResult:
        """Play ``n_samples`` episodes of every item over the workers, with ``config`` (None: the
        engine's; its ``concurrency`` split over the workers); same result as the local engine's
        (trajectories ordered by (group, sample), groups from ``first_group``, the batch's
        counts)."""
        start = time.monotonic()
        config = config or self.config
        jobs = episode_jobs(items, config.n_samples)
        with self._lock:
            actors = self._ensure_actors(items)
            weights = self._weights
        shards: list[list[EpisodeJob]] = [[] for _ in actors]
        for job in jobs:  # whole groups per worker, groups dealt round robin
            shards[job[0] % len(actors)].append(job)
        busy = [(i, actors[i], shard) for i, shard in enumerate(shards) if shard]
        wconfig = self._worker_config(config)
        outcomes = await asyncio.gather(
            *(self._run_shard(actor, shard, wconfig, weights, first_group) for _, actor, shard in busy),
            return_exceptions=True,
        )
        trajs: list[Trajectory] = []
        syncs: list[_ShardReport] = []
        retries = 0
        lost = False
        for (index, _, shard), outcome in zip(busy, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                lost = True
                failure = Failure(  # the worker, not the episode: another worker may play it
                    FailureStage.SETUP, type(outcome).__name__, f"{outcome} (Ray worker lost)", retriable=True
                )
                trajs += [_lost(job, failure, first_group) for job in shard]
                with self._lock:
                    self.counts.episodes_lost += len(shard)
                continue
            report, replayed = outcome
            trajs += report.trajectories
            retries += report.retries
            with self._lock:
                c = self.counts
                c.workers_restarted += int(report.restarted)
                c.episodes_replayed += len(shard) if replayed else 0
                c.episodes_by_worker[index] = c.episodes_by_worker.get(index, 0) + len(report.trajectories)
            if report.synced:
                syncs.append(report)
        if syncs:  # the last sync's figures: its size and its slowest worker
            with self._lock:
                self.counts.weight_syncs += len(syncs)
                self.counts.sync_bytes = max(r.sync_bytes for r in syncs)
                self.counts.sync_seconds = max(r.sync_seconds for r in syncs)
        if lost:
            self.close()  # the next run starts fresh workers
        trajs.sort(key=lambda t: (t.group_id, t.sample_index))
        _check_once_each(jobs, trajs, first_group)
        stats = RolloutStats.of(trajs, time.monotonic() - start, retries)
        return RolloutResult(trajs, stats, step_wise=config.step_wise)

    async def _run_shard(
        self,
        actor: Any,
        shard: list[EpisodeJob],
        config: RolloutConfig,
        weights: tuple[int, list[Any]] | None,
        first_group: int = 0,
    ) -> tuple[_ShardReport, bool]:
        """The worker's report, and whether the shard had to be played again: a worker lost
        mid-shard is restarted by Ray (``max_restarts``) and the call sent once more."""
        import ray

        try:
            return await actor.run.remote(shard, config, weights, first_group), False
        except ray.exceptions.RayActorError:
            if self.ray_config.max_restarts == 0:
                raise
        deadline = time.monotonic() + self.ray_config.placement_timeout_s
        while True:  # Ray restarts it (elsewhere when its node is gone); died for good: raises
            try:
                return await actor.run.remote(shard, config, weights, first_group), True
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)  # still restarting


def _shareable(tensor: Any) -> Any:
    """A CPU copy Ray can share without pickling its bytes: a numpy array (read from the object
    store's shared memory by the workers on that node, without a copy; a 540 MB state dict put
    in 0.04-0.3 s against 0.6-1.3 s as torch tensors) where numpy has the dtype, else the tensor."""
    tensor = tensor.detach().to("cpu")
    try:
        return tensor.numpy()
    except TypeError:  # bfloat16 and other dtypes numpy lacks
        return tensor


def _tensor(value: Any) -> Any:
    """A tensor over what :func:`_shareable` gave (the store's read-only memory: only read)."""
    import warnings

    import numpy as np
    import torch

    if not isinstance(value, np.ndarray):
        return value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not writable": it is only copied from
        return torch.from_numpy(value)


def _check_once_each(jobs: Sequence[EpisodeJob], trajs: Sequence[Trajectory], first_group: int = 0) -> None:
    """Every job's episode exactly once: a re-played shard must neither lose nor repeat one."""
    want = sorted((first_group + group, sample) for group, sample, _ in jobs)
    got = [(t.group_id, t.sample_index) for t in trajs]
    if got != want:
        raise RuntimeError(
            f"the Ray workers returned {len(got)} episodes for {len(want)} jobs, or not one of each "
            "(group, sample): refusing a batch that lost or repeated episodes"
        )


def register_specs(specs: Sequence[Any]) -> None:
    """Register, in this process, the env specs (``skyrl_gym.EnvSpec``) it does not know yet:
    envs a driver registered at run time, shipped to a Ray actor."""
    import skyrl_gym

    for spec in specs:
        if spec.id not in skyrl_gym.registration.registry:
            skyrl_gym.register(
                spec.id, spec.entry_point, spec.kwargs, description=spec.description, source=spec.source
            )


def in_bundle(group: Any, index: int) -> Any:
    """The scheduling strategy that puts an actor in bundle ``index`` of placement ``group``
    (None, Ray's default placement, when there is no group)."""
    if group is None:
        return None
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)


def place_bundles(
    ray: Any,
    count: int,
    bundle: Mapping[str, float],
    *,
    strategy: str,
    timeout_s: float,
    what: str,
    advice: str,
    name: str = "",
) -> Any:
    """A Ray placement group of ``count`` copies of ``bundle``, ready. When the cluster cannot
    place it within ``timeout_s`` the group is removed and a ``ConfigError`` says what was asked
    (``count`` ``what``), what the cluster has in all and on its largest node, and ``advice``
    (which settings to change), instead of waiting forever."""
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy, name=name)
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise _unplaceable(ray, count, dict(bundle), strategy, timeout_s, what, advice) from None
    return group


def _unplaceable(
    ray: Any, count: int, bundle: dict[str, float], strategy: str, timeout_s: float, what: str, advice: str
) -> Exception:
    """The error for a placement group the cluster did not place in time."""
    from skyrl_gym.errors import ConfigError

    total = ray.cluster_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    wanted = ", ".join(f"{_amount(k, v)} {k}" for k, v in bundle.items())
    short = []
    for key, each in bundle.items():
        have = total.get(key, 0.0)
        largest = max((n.get(key, 0.0) for n in nodes), default=0.0)
        if have < each * count or largest < each:
            short.append(
                f"{_amount(key, each * count)} {key} in all (the cluster has {_amount(key, have)}; "
                f"its largest node {_amount(key, largest)})"
            )
    missing = "; ".join(short) or (
        f"room for the bundles under strategy {strategy} (other work may hold the resources)"
    )
    return ConfigError(
        f"the Ray cluster could not place {count} {what} of {wanted} each within {timeout_s:g}s: "
        f"missing {missing}. {advice}, or add nodes"
    )


def _amount(key: str, value: float) -> str:
    return f"{value / 1e9:g} GB of" if key == "memory" else f"{value:g}"


def _lost(job: EpisodeJob, error: Failure, first_group: int = 0) -> Trajectory:
    group, sample, item = job
    return Trajectory.failed(
        error,
        prompt_id=item.prompt_id or str(group),
        group_id=first_group + group,
        sample_index=sample,
        env_id=item.env_id,
    )
