"""``skyrl export``: a run's checkpoint as a model directory that other tools open as it is.

:func:`export_checkpoint` rebuilds the run's model from its ``config.json`` (the base model, and
the LoRA wrapper when the run had one), loads the checkpoint's weights into it (whatever form
:mod:`trainers.checkpoint` stored them in, FSDP2's ``model.pt`` included) and writes a Hugging
Face directory with ``save_pretrained``: safetensors weights, the model config, the generation
config, and the tokenizer with its chat template. ``transformers``
(``AutoModelForCausalLM.from_pretrained``), vLLM, ``skyrl eval --model`` and ``skyrl serve
--model`` load it directly.

A LoRA run exports the merged model (base weights plus the adapters, peft's
``merge_and_unload``) with the adapter itself in ``adapter/`` beside it; ``merge_lora=False``
writes the adapter alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from skyrl_gym.errors import ConfigError
from trainers.checkpoint import latest_checkpoint, load_weights

__all__ = ["checkpoint_dir", "export_checkpoint"]


def checkpoint_dir(run_dir: str | os.PathLike, step: int | None = None) -> Path:
    """The complete checkpoint of ``run_dir`` after ``step`` (``None``: the newest one)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise ConfigError(
            f"{run_dir} is not a run directory (no config.json); pass the --run-dir of a skyrl train run"
        )
    if step is None:
        found = latest_checkpoint(run_dir)
        if found is None:
            raise ConfigError(f"{run_dir} has no complete checkpoint yet (see --checkpoint-every)")
        return found
    path = run_dir / "checkpoints" / f"step_{step:06d}"
    if not (path / "COMPLETE").exists():
        have = sorted(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*"))
        raise ConfigError(f"{run_dir} has no complete checkpoint of step {step}; it has steps {have}")
    return path


def export_checkpoint(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    step: int | None = None,
    merge_lora: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write the checkpoint of ``run_dir`` after ``step`` (newest by default) to ``out`` as a
    Hugging Face model directory (see the module docstring); returns ``out``."""
    from skyrl_agent.models import load_model_and_tokenizer
    from trainers.config import saved_config
    from trainers.lora import apply_lora

    ckpt = checkpoint_dir(run_dir, step)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out} exists and is not empty; pass --overwrite or choose another directory")
        shutil.rmtree(out)
    spec = saved_config(run_dir).model
    model, tokenizer = load_model_and_tokenizer(spec.path)
    if spec.lora_rank > 0:
        model = apply_lora(
            model, spec.lora_rank, spec.lora_alpha, spec.lora_target_modules, spec.lora_dropout
        )
    load_weights(model, ckpt)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    if spec.lora_rank > 0:
        adapter_dir = out / "adapter" if merge_lora else out
        model.save_pretrained(adapter_dir)
        tokenizer.save_pretrained(adapter_dir)
        if not merge_lora:
            return out
        model = model.merge_and_unload()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
