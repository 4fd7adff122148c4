"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint is a directory ``<run_dir>/checkpoints/step_<N>`` holding the model weights, the
optimizer and scheduler states, the prompt sampler's position, every RNG state (Python, NumPy
when present, torch) and the step, written to a temporary directory and renamed into place, so a
``kill -9`` mid-write never leaves a half checkpoint that looks whole. ``latest_checkpoint``
finds the newest complete one; older ones beyond ``keep`` are removed.

The weights are kept in a form other tools load as they are, and only once:

- a Hugging Face model (``transformers.PreTrainedModel``): ``model/``, a ``save_pretrained``
  directory (safetensors, config, generation config, and the tokenizer with its chat template
  when one is given), which ``transformers``, vLLM, ``skyrl eval --model`` and ``skyrl serve
  --model`` open directly;
- a LoRA model (peft): ``adapter/``, peft's adapter directory (the frozen base weights are the
  run's base model, so the adapter is all a resume needs); ``skyrl export`` merges it into a
  full model directory;
- anything else, or weights handed over as ``model_state`` (FSDP2 gathers them): ``model.pt``.
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
    "save_weights",
    "load_weights",
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
    tokenizer: Any = None,
) -> Path:
    """Write a checkpoint for ``state.step`` atomically; keep the newest ``keep`` ones.

    ``critic`` (a value head) is saved beside the model as ``critic.pt``. ``model_state`` and
    ``optimizer_state`` replace ``model.state_dict()`` and ``optimizer.state_dict()`` (FSDP2
    gathers the full weights first). ``tokenizer`` is saved into the model directory."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state.step:06d}"
    for stale in root.glob(".tmp_step_*"):  # left by a writer killed mid-save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp_step_{state.step:06d}_{os.getpid()}"
    tmp.mkdir()
    save_weights(model, tmp, tokenizer=tokenizer, model_state=model_state)
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
    for path in tmp.rglob("*"):  # flush file contents before the rename makes them visible
        if path.is_file():
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
    load_weights(model, path)
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


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _is_hf(model: torch.nn.Module) -> bool:
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a training dependency
        return False
    return isinstance(model, transformers.PreTrainedModel)


def save_weights(
    model: torch.nn.Module,
    directory: str | os.PathLike,
    *,
    tokenizer: Any = None,
    model_state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write ``model``'s weights into ``directory`` in the form the module docstring names
    (``model/``, ``adapter/`` or ``model.pt``); returns the path written."""
    directory = Path(directory)
    if model_state is None and _is_peft(model):
        out = directory / "adapter"
        model.save_pretrained(out)
    elif model_state is None and _is_hf(model):
        out = directory / "model"
        model.save_pretrained(out, safe_serialization=True)
    else:
        weights = model_state if model_state is not None else model.state_dict()
        out = directory / "model.pt"
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, out)
        return out
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def load_weights(model: torch.nn.Module, directory: str | os.PathLike) -> None:
    """Load what :func:`save_weights` wrote into ``model``, in place."""
    directory = Path(directory)
    if (directory / "model.pt").exists():
        model.load_state_dict(torch.load(directory / "model.pt", map_location="cpu", weights_only=True))
    elif (directory / "adapter").is_dir():
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        if not _is_peft(model):
            raise ValueError(f"{directory} holds a LoRA adapter; build the model with the run's --lora-rank")
        result = set_peft_model_state_dict(
            model, load_file(directory / "adapter" / "adapter_model.safetensors")
        )
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"{directory}/adapter does not fit this model: {result.unexpected_keys[:5]}")
    elif (directory / "model").is_dir():
        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for shard in sorted((directory / "model").glob("*.safetensors")):
            state.update(load_file(shard))
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = set(getattr(model, "all_tied_weights_keys", None) or _tied_keys(model))
        if unexpected or set(missing) - tied:
            raise ValueError(
                f"{directory}/model does not fit this model: missing {sorted(set(missing) - tied)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        if hasattr(model, "tie_weights"):
            model.tie_weights()
    else:
        raise FileNotFoundError(f"{directory} holds no weights (model/, adapter/ or model.pt)")


def _tied_keys(model: torch.nn.Module) -> list[str]:
    """Parameter names that share storage with an earlier one (tied embeddings)."""
    seen: dict[int, str] = {}
    tied = []
    for name, t in model.state_dict(keep_vars=True).items():
        ptr = t.data_ptr()
        if ptr in seen:
            tied.append(name)
        else:
            seen[ptr] = name
    return tied
