"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint is a directory ``<run_dir>/checkpoints/step_<N>`` holding the model weights
(``model.pt``), the optimizer and scheduler states, the prompt sampler's position, every RNG
state (Python, NumPy when present, torch) and the step, written to a temporary directory and
renamed into place, so a ``kill -9`` mid-write never leaves a half checkpoint that looks whole.
``latest_checkpoint`` finds the newest complete one; older ones beyond ``keep`` are removed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "TrainState",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "rng_state",
    "set_rng_state",
]

_DONE = "COMPLETE"


@dataclass
class TrainState:
    """What a checkpoint restores besides the weights."""

    step: int
    """Training steps finished."""
    sampler: dict[str, Any]
    """The prompt sampler's ``state_dict()``."""
    rng: dict[str, Any]
    """``rng_state()`` at the time of saving."""
    extra: dict[str, Any]
    """Anything else the loop keeps (best eval, wall time so far...)."""


def rng_state() -> dict[str, Any]:
    """The state of every random generator the loop uses."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def save_checkpoint(
    run_dir: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    keep: int = 2,
    critic: torch.nn.Module | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint for ``state.step`` atomically; keep the newest ``keep`` ones.

    ``critic`` (a value head) is saved beside the model as ``critic.pt``. ``model_state`` and
    ``optimizer_state`` replace ``model.state_dict()`` and ``optimizer.state_dict()`` (FSDP2
    gathers the full weights first)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state.step:06d}"
    for stale in root.glob(".tmp_step_*"):  # left by a writer killed mid-save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp_step_{state.step:06d}_{os.getpid()}"
    tmp.mkdir()
    weights = model_state if model_state is not None else model.state_dict()
    torch.save({k: v.detach().cpu() for k, v in weights.items()}, tmp / "model.pt")
    if critic is not None:
        torch.save({k: v.detach().cpu() for k, v in critic.state_dict().items()}, tmp / "critic.pt")
    torch.save(
        {
            "optimizer": optimizer_state if optimizer_state is not None else optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": state.rng,
        },
        tmp / "trainer.pt",
    )
    (tmp / "state.json").write_text(
        json.dumps({"step": state.step, "sampler": state.sampler, "extra": state.extra})
    )
    (tmp / _DONE).write_text("ok")
    for path in tmp.iterdir():  # flush file contents before the rename makes them visible
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep > 0:  # keep the newest `keep` checkpoints, this one included
        older = sorted(p for p in root.glob("step_*") if p != final)
        for old in older[: max(0, len(older) - (keep - 1))]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory of ``run_dir``, or ``None``."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    complete = sorted(p for p in root.glob("step_*") if (p / _DONE).exists())
    return complete[-1] if complete else None


def load_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    critic: torch.nn.Module | None = None,
) -> TrainState:
    """Load weights, optimizer and scheduler in place; restore RNGs; return the :class:`TrainState`."""
    path = Path(path)
    model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
    if critic is not None:
        if not (path / "critic.pt").exists():
            raise FileNotFoundError(
                f"{path} has no critic.pt: it was not saved by a run with a critic (--advantage gae)"
            )
        critic.load_state_dict(torch.load(path / "critic.pt", map_location="cpu", weights_only=True))
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(trainer["optimizer"])
    if scheduler is not None and trainer["scheduler"] is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])
    meta = json.loads((path / "state.json").read_text())
    return TrainState(step=meta["step"], sampler=meta["sampler"], rng=trainer["rng"], extra=meta["extra"])
