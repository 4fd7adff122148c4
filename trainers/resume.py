"""A run's directory and how a run continues from it.

``<run_dir>`` holds ``config.json``, ``metrics.jsonl``, ``trajectories.jsonl``, ``checkpoints/``
(:mod:`trainers.checkpoint`: weights, optimizer, scheduler, sampler position, RNG states) and,
at the end, ``summary.json`` and the plots. :func:`open_run` refuses to write over a run's
checkpoints unless asked to resume; :func:`restore` continues from the newest checkpoint and cuts
the logs back to it (lines a killed run wrote after its last checkpoint would be written again),
or starts the logs afresh; :func:`save` writes a checkpoint of the step just finished. Rank 0
writes; every rank takes part in the collectives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError
from trainers.checkpoint import TrainState, latest_checkpoint, load_checkpoint, rng_state, save_checkpoint
from trainers.config import TrainConfig
from trainers.data import PromptSampler
from trainers.distributed import DistContext, full_state_dict
from trainers.evaluation import EvalResult
from trainers.metrics import truncate_jsonl
from trainers.models import Learner

__all__ = ["RunFiles", "open_run", "restore", "save"]


@dataclass(frozen=True)
class RunFiles:
    """Where a run writes, and the checkpoint it continues from."""

    path: Path
    """The run directory."""
    checkpoint: Path | None
    """The newest complete checkpoint when resuming, else ``None``."""

    @property
    def metrics(self) -> Path:
        """``metrics.jsonl``: one line per train step and per evaluation."""
        return self.path / "metrics.jsonl"

    @property
    def trajectories(self) -> Path:
        """``trajectories.jsonl``: every episode, with its step."""
        return self.path / "trajectories.jsonl"

    def append_trajectories(self, step: int, trajectories: list[Any]) -> None:
        """Add a step's episodes to ``trajectories.jsonl``."""
        with open(self.trajectories, "a") as fh:
            for t in trajectories:
                fh.write(json.dumps({"step": step, **t.to_dict()}) + "\n")


def open_run(cfg: TrainConfig, dist: DistContext) -> RunFiles:
    """Create ``cfg.run.run_dir``, find the checkpoint to resume from, record ``config.json``.

    Refuses (:class:`ConfigError`) a run directory that has checkpoints when ``cfg.run.resume`` is
    off, and resuming under FSDP2 (its checkpoints hold full weights only)."""
    run_dir = Path(cfg.run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = latest_checkpoint(run_dir) if cfg.run.resume else None
    if not cfg.run.resume and (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
        raise ConfigError(
            f"{run_dir} already has checkpoints: pass --resume to continue, or use another --run-dir"
        )
    if ckpt is not None and dist.fsdp:
        raise ConfigError("--resume is not supported with FSDP2 yet (checkpoints hold full weights only)")
    dist.barrier()  # every rank has looked at run_dir before rank 0 writes to it
    if dist.is_main:
        (run_dir / "config.json").write_text(json.dumps(cfg.as_tables(), indent=2))
    return RunFiles(run_dir, ckpt)


def restore(
    run: RunFiles, learner: Learner, sampler: PromptSampler, say: Callable[[str], None]
) -> tuple[int, EvalResult | None]:
    """``(steps already done, baseline evaluation)`` after loading ``run.checkpoint`` into the
    learner and the sampler (and cutting the logs back to it); ``(0, None)`` for a fresh run,
    whose logs start empty."""
    cfg, dist = learner.cfg, learner.dist
    if run.checkpoint is None:
        if cfg.run.resume:
            say(f"[train] --resume: no checkpoint in {run.path}, starting from step 0")
            if dist.is_main:
                truncate_jsonl(run.metrics, 0)
                truncate_jsonl(run.trajectories, -1)
        elif dist.is_main:
            run.metrics.unlink(missing_ok=True)
            run.trajectories.unlink(missing_ok=True)
        return 0, None
    state = load_checkpoint(
        run.checkpoint,
        model=learner.model,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        critic=learner.critic,
    )
    sampler.load_state_dict(state.sampler)
    baseline = EvalResult(**state.extra["baseline"]) if state.extra.get("baseline") else None
    if dist.is_main:
        dropped = truncate_jsonl(run.metrics, state.step) + truncate_jsonl(run.trajectories, state.step)
        say(
            f"[train] resumed from {run.checkpoint.name} (step {state.step}); "
            f"dropped {dropped} log lines written after it"
        )
    return state.step, baseline


def save(
    run: RunFiles, step: int, learner: Learner, sampler_state: dict[str, Any], baseline: EvalResult | None
) -> None:
    """Checkpoint the learner after ``step`` with the sampler's position after that step's batch.

    Every rank calls it: data-parallel replicas are checked to be equal, FSDP2 gathers the full
    weights, rank 0 writes."""
    cfg, dist, model = learner.cfg, learner.dist, learner.model
    if dist.enabled and not dist.parameters_in_sync(model):
        raise RuntimeError(f"data-parallel replicas diverged by step {step} (a bug: please report it)")
    model_state = full_state_dict(model, dist) if dist.fsdp else None  # a collective: every rank
    if not dist.is_main:
        dist.barrier()
        return
    extra = {"baseline": baseline.as_dict() if baseline else None}
    state = TrainState(step=step, sampler=sampler_state, rng=rng_state(), extra=extra)
    save_checkpoint(
        run.path,
        model=model,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        state=state,
        keep=cfg.run.keep_checkpoints,
        critic=learner.critic,
        model_state=model_state,
        optimizer_state={} if dist.fsdp else None,
        tokenizer=learner.tokenizer,
    )
    dist.barrier()
