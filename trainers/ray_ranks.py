"""Trainer ranks as Ray actors (``skyrl train --ray-address A --ray-trainer-ranks N``).

The driver (the ``skyrl train`` process) stays small: it places ``N`` rank actors with one
placement group (``ray_cpus_per_rank`` / ``ray_gpus_per_rank`` bundles; a group the cluster
cannot hold fails within a minute naming what is missing), asks rank 0 for an address on its
node, and starts every rank's :func:`trainers.loop.train` with the environment ``torchrun``
would give it (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``LOCAL_RANK`` 0,
since Ray shows each actor only its own GPUs). From there a rank is exactly a ``torchrun`` rank
(:mod:`trainers.distributed`): gloo data parallelism on CPU, NCCL with FSDP2 on GPUs. With
rollout workers (``ray_workers``) rank 0 alone drives them (:mod:`trainers.ray_sampler`): it
plays the whole batch on the workers, the batch is all-gathered to every rank, and after each
update rank 0 puts the weights in the object store once.

The driver watches the ranks with ``ray.wait``. A rank that raises stops the run with that
error (the other ranks are killed instead of waiting in a collective); a rank whose process or
node is lost stops it with :class:`TrainerRankLostError`, which names the newest checkpoint:
the same command with ``--resume`` continues from it. Ranks are not restarted: a
``torch.distributed`` group cannot take a new member mid-run. When the driver ends (even by
``kill -9``), Ray ends its actors with it, the rollout workers rank 0 started included.

Every rank reads the model and the run directory (checkpoints on ``--resume``) and rank 0 writes
it, so on a real cluster both must be on storage every node sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from skyrl_gym.errors import ConfigError, SkyRLError, require
from trainers.config import TrainConfig
from trainers.ray_sampler import WORKER_GROUP_ENV

#: What each rank runs: :func:`trainers.loop.train` (handed in, so this module does not import
#: the loop that imports it). It must pickle by reference (a module-level function).
Entry = Callable[[TrainConfig], Any]

__all__ = ["RANK_ENV", "RayTrainerRanks", "TrainerRankLostError", "in_ray_rank", "train_on_ray"]

RANK_ENV = "SKYRL_RAY_TRAINER_RANK"
"""Set in a rank actor's environment: its ``train`` call is a rank, not a launcher."""

PLACEMENT_TIMEOUT_S = 60.0
"""How long the ranks' placement group may wait for the cluster before the run fails."""

START_TIMEOUT_S = 180.0
"""How long the placed ranks may take to start their processes and answer."""

LOST_GRACE_S = 10.0
"""When a rank fails, how long the others are watched for a lost process or node, the likelier
cause (a peer's death reaches a rank as a collective's error)."""


class TrainerRankLostError(SkyRLError, RuntimeError):
    """A trainer rank's process or node was lost mid-run: the run stopped (a process group cannot
    take a new member); the message names the checkpoint ``--resume`` continues from."""


def in_ray_rank() -> bool:
    """True inside a rank actor that :class:`RayTrainerRanks` started."""
    return os.environ.get(RANK_ENV) == "1"


def train_on_ray(cfg: TrainConfig, entry: Entry) -> Any:
    """Run ``entry(cfg)`` on ``cfg.run.ray_trainer_ranks`` rank actors; rank 0's result."""
    with RayTrainerRanks(cfg, entry) as ranks:
        ranks.start()
        return ranks.wait()


class _Rank:
    """One trainer rank in a process of its own (a Ray actor)."""

    def __init__(self, specs: list[Any]) -> None:
        from skyrl_agent.ray_engine import register_specs

        register_specs(specs)  # envs the driver registered at run time

    def where(self) -> tuple[int, str]:
        """``(process id, node address)``."""
        import ray

        return os.getpid(), ray.util.get_node_ip_address()

    def rendezvous(self) -> tuple[str, int]:
        """An address and a free port on this node for the group's store (rank 0's)."""
        import socket

        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        return host, port

    def train(
        self, entry: Entry, cfg: TrainConfig, rank: int, world_size: int, host: str, port: int, workers: str
    ) -> Any:
        """``entry(cfg)`` as rank ``rank``; ``workers``: the name of the rollout workers' group."""
        os.environ.update(
            {
                WORKER_GROUP_ENV: workers,
                RANK_ENV: "1",
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": "0",
                "MASTER_ADDR": host,
                "MASTER_PORT": str(port),
            }
        )
        return entry(cfg)


class RayTrainerRanks:
    """The run's trainer ranks on a Ray cluster (see the module docstring)::

    with RayTrainerRanks(cfg, trainers.loop.train) as ranks:
        ranks.start()          # placed, rendezvous, every rank training
        result = ranks.wait()  # rank 0's TrainResult, or the first rank's error
    """

    def __init__(self, cfg: TrainConfig, entry: Entry) -> None:
        """``entry``: what each rank runs with ``cfg`` (:func:`trainers.loop.train`)."""
        if cfg.run.ray_address is None or cfg.run.ray_trainer_ranks < 1:
            raise ConfigError("RayTrainerRanks needs ray_address and ray_trainer_ranks >= 1")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError(
                "--ray-trainer-ranks starts the trainer ranks itself: launch it without torchrun"
            )
        self.cfg = cfg
        self.entry = entry
        self.world_size = cfg.run.ray_trainer_ranks
        self._ray: Any = None
        self._group: Any = None
        self._actors: list[Any] = []
        self._refs: dict[Any, int] = {}
        self._where: list[tuple[int, str]] = []
        self._workers = ""

    def __enter__(self) -> RayTrainerRanks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Place the ranks, find rank 0's address and start every rank's training."""
        import uuid

        import skyrl_gym
        from skyrl_agent.ray_engine import in_bundle, place_bundles

        ray: Any = require("ray", "ray", "running trainer ranks on a Ray cluster")
        if not ray.is_initialized():
            ray.init(address=self.cfg.run.ray_address)
        self._ray = ray
        run = self.cfg.run
        wanted = {"CPU": run.ray_cpus_per_rank, "GPU": run.ray_gpus_per_rank}
        bundle = {k: v for k, v in wanted.items() if v > 0}
        if bundle:
            self._group = place_bundles(
                ray,
                self.world_size,
                bundle,
                strategy="PACK",
                timeout_s=PLACEMENT_TIMEOUT_S,
                what="trainer ranks",
                advice="Ask for less per rank (--ray-cpus-per-rank, --ray-gpus-per-rank), "
                "fewer ranks (--ray-trainer-ranks)",
            )
        specs = [s for s in skyrl_gym.list_envs() if s.source == "user"]
        self._workers = f"skyrl-rollout-workers-{uuid.uuid4().hex[:12]}"
        for index in range(self.world_size):
            remote = ray.remote(_Rank).options(
                num_cpus=run.ray_cpus_per_rank,
                num_gpus=run.ray_gpus_per_rank,
                max_restarts=0,  # a process group cannot take a new member mid-run
                scheduling_strategy=in_bundle(self._group, index),
            )
            self._actors.append(remote.remote(specs))
        self._where = ray.get([a.where.remote() for a in self._actors], timeout=START_TIMEOUT_S)
        host, port = ray.get(self._actors[0].rendezvous.remote(), timeout=START_TIMEOUT_S)
        self._refs = {
            actor.train.remote(self.entry, self.cfg, rank, self.world_size, host, port, self._workers): rank
            for rank, actor in enumerate(self._actors)
        }

    def pids(self) -> list[int]:
        """The ranks' process ids, by rank (asked before they started training: an actor answers
        one call at a time)."""
        return [pid for pid, _ in self._where]

    def wait(self) -> Any:
        """Rank 0's result once every rank has finished; the first failure (a rank's own error
        as itself, a lost rank as :class:`TrainerRankLostError`) as soon as it happens."""
        ray = self._ray
        pending = list(self._refs)
        results: dict[int, Any] = {}
        while pending:  # each rank's collectives time out (trainers.distributed), so this ends
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                rank = self._refs[ref]
                try:
                    results[rank] = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    raise self._lost(rank, exc) from None
                except ray.exceptions.RayTaskError as exc:
                    self._raise_if_lost(pending)  # a peer's death often surfaces first as a gloo error
                    raise exc.as_instanceof_cause() from None
        return results[0]

    def _raise_if_lost(self, pending: list[Any]) -> None:
        """Raise :class:`TrainerRankLostError` when one of the ``pending`` ranks died (looked at
        for a few seconds: the error of a rank whose peer died may arrive first)."""
        ray = self._ray
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=LOST_GRACE_S)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                raise self._lost(self._refs[ref], exc) from None
            except ray.exceptions.RayTaskError:
                pass

    def _kill_ranks(self) -> None:
        """Kill every rank's actor (those already gone are skipped)."""
        for actor in self._actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _stop_survivors(self) -> None:
        """Kill every rank and wait (a few seconds at most) until their calls have ended, so
        that no rank writes a checkpoint after the lost rank's error names the newest one."""
        self._kill_ranks()
        self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=LOST_GRACE_S)

    def _lost(self, rank: int, exc: BaseException) -> TrainerRankLostError:
        from trainers.checkpoint import latest_checkpoint

        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        pid, node = self._where[rank]
        # the other ranks may still be finishing a step (and its checkpoint) the lost rank took
        # part in: stop them before reading which checkpoint is the newest
        self._stop_survivors()
        ckpt = latest_checkpoint(self.cfg.run.run_dir)
        then = (
            f"the newest checkpoint is {ckpt.name} in {ckpt.parent}: run the same command with --resume "
            "to continue from it"
            if ckpt is not None
            else f"no checkpoint was written yet in {self.cfg.run.run_dir}: start the run again "
            "(with --resume it starts from step 0)"
        )
        return TrainerRankLostError(
            f"trainer rank {rank} of {self.world_size} (process {pid} on {node}) was lost: its process or "
            f"node died ({cause}); "
            f"the run stopped, since a process group cannot take a new member. {then}"
        )

    def close(self) -> None:
        """Kill the ranks (and with rank 0 the rollout workers it started) and free the ranks' and
        the workers' placement groups."""
        if self._ray is None:
            return
        self._kill_ranks()
        self._actors = []
        from ray.util.placement_group import get_placement_group, remove_placement_group

        groups = [self._group]
        if self._workers:  # rank 0 made it; a killed rank 0 leaves it behind
            try:
                groups.append(get_placement_group(self._workers))
            except ValueError:  # rank 0 freed it (or never made it)
                pass
        for group in groups:
            if group is not None:
                try:
                    remove_placement_group(group)
                except Exception:  # noqa: BLE001 - removed already, or with the cluster
                    pass
        self._group, self._workers = None, ""
