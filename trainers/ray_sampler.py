"""The training run's rollouts on a Ray cluster (``skyrl train --ray-address``).

:class:`RaySampler` stands where the local sampler (an ``HFPolicy`` in the trainer's process)
stands otherwise: :func:`trainers.rollouts.play` hands it the step's prompts, and
``Learner.sync_sampler`` hands it the trained weights after every update. Behind it a
:class:`skyrl_agent.ray_engine.RayRolloutEngine` runs ``ray_workers`` actors, placed by a
placement group of ``ray_cpus_per_worker`` / ``ray_gpus_per_worker`` /
``ray_memory_per_worker_gb`` bundles; each builds its own copy of the sampler from the run's
model (:func:`worker_sampler`), plays whole groups with its envs in its own process, and loads
the newest weights from Ray's object store before a shard when its own are older. Every episode
records the version it was sampled with (``Trajectory.policy_version``); ``ray_*`` figures in
the metrics say what the workers did (restarts, episodes played again, the last sync's bytes
and seconds).

The trainer stays in the driver process, or with ``ray_trainer_ranks`` runs as Ray actors
(:mod:`trainers.ray_ranks`), of which rank 0 alone drives the workers.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine, WorkerCounts
from skyrl_agent.types import PromptItem, RolloutConfig, Trajectory
from trainers.config import TrainConfig

__all__ = ["WORKER_GROUP_ENV", "RaySampler", "worker_sampler", "ray_config"]


def worker_sampler(model_path: str, threads: int, settings: Mapping[str, Any], engine: str = "hf") -> Any:
    """The sampler a Ray worker builds for itself: the run's model, loaded in the worker (on its
    GPU when Ray gave it one), in an ``HFPolicy`` with ``settings`` (its keyword arguments: the
    ones the trainer's own sampler takes, ``trainers.models``); with ``engine="vllm"`` a
    ``VLLMPolicy`` of the model built with ``settings`` instead."""
    import torch

    if engine == "vllm":
        from skyrl_agent.policies.vllm_policy import VLLMPolicy

        if threads > 0:
            torch.set_num_threads(threads)
        return VLLMPolicy(model_path, **settings)
    from skyrl_agent.models import load_model_and_tokenizer
    from skyrl_agent.policies.hf import HFPolicy

    if threads > 0:
        torch.set_num_threads(threads)
    model, tokenizer = load_model_and_tokenizer(model_path)
    if torch.cuda.is_available():
        model.to("cuda")
    model.eval().requires_grad_(False)
    return HFPolicy(model, tokenizer, **settings)


WORKER_GROUP_ENV = "SKYRL_RAY_WORKER_GROUP"
"""Set by :mod:`trainers.ray_ranks` in rank 0's environment: the name of the workers' placement
group, which the driver frees when rank 0 is lost."""


def ray_config(cfg: TrainConfig) -> RayConfig:
    """The workers ``cfg.run`` asks for (``local`` starts a cluster in this process)."""
    run = cfg.run
    return RayConfig(
        placement_name=os.environ.get(WORKER_GROUP_ENV, ""),
        address=run.ray_address,
        num_workers=run.ray_workers,
        num_cpus_per_worker=run.ray_cpus_per_worker,
        num_gpus_per_worker=run.ray_gpus_per_worker,
        memory_per_worker_gb=run.ray_memory_per_worker_gb,
        max_restarts=run.ray_max_restarts,
    )


class RaySampler:
    """The run's sampler as Ray workers (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, tokenizer: Any, settings: Mapping[str, Any]) -> None:
        """``settings``: the ``HFPolicy`` keyword arguments each worker's sampler is built with."""
        factory = functools.partial(
            worker_sampler,
            cfg.model.path,
            int(cfg.run.ray_cpus_per_worker),
            dict(settings),
            cfg.sampler.engine,
        )
        self.engine = RayRolloutEngine(factory, cfg.rollout, ray_config(cfg))
        self.tokenizer = tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad or 0)

    def play(
        self, items: Sequence[PromptItem], config: RolloutConfig, first_group: int = 0
    ) -> list[Trajectory]:
        """The episodes of ``items`` under ``config``, played by the workers with the newest
        weights, their groups numbered from ``first_group``."""
        return self.engine.run_sync(items, config, first_group).trajectories

    def update_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> int:
        """Give the workers the trained weights as ``version`` (the trainer's steps finished;
        they load them before their next shard); returns the version."""
        return self.engine.update_weights(state_dict, version)

    def relabel(self, version: int) -> None:
        """The workers' weights are also ``version`` (a step that did not update)."""
        self.engine.relabel(version)

    @property
    def counts(self) -> WorkerCounts:
        """What the workers did so far (restarts, replays, the last sync)."""
        return self.engine.counts

    def close(self) -> None:
        """Stop the workers (the cluster stays)."""
        self.engine.close()
