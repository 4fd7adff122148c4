"""LoRA through peft: wrap the policy, and hand merged weights to a plain model that samples.

:func:`apply_lora` freezes the base model and adds rank-``r`` adapters to the chosen linear
layers (Hu et al. 2021, "LoRA": ``W x + (alpha / r) B A x`` with ``B`` starting at zero, so the
wrapped model starts equal to the base). Only the adapters train.

Sampling from a model with unmerged adapters costs two extra small matmuls per layer and token,
which on CPU makes decoding slower than the full model. :func:`merged_weights` computes
``W + (alpha / r) B A`` for every adapted layer without touching the training model, keyed like
the base model's ``state_dict()``, so a separate plain copy of the base model (the sampler's) can
take them with ``HFPolicy.update_weights``. Layers without an adapter never change, so only the
adapted weights travel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from skyrl_gym.errors import ConfigError, require

__all__ = [
    "adapter_config",
    "adapter_state_dict",
    "apply_lora",
    "is_lora_model",
    "merged_state_dict",
    "merged_weights",
]


def apply_lora(
    model: torch.nn.Module,
    rank: int,
    alpha: int,
    target_modules: Sequence[str] = ("all-linear",),
    dropout: float = 0.0,
) -> torch.nn.Module:
    """``model`` wrapped by ``peft.get_peft_model`` with LoRA adapters; the base weights are frozen."""
    if rank < 1:
        raise ConfigError(f"LoRA rank must be >= 1, got {rank}")
    peft: Any = require("peft", "training", "LoRA")
    targets: str | list[str] = (
        "all-linear" if tuple(target_modules) == ("all-linear",) else [str(t) for t in target_modules]
    )
    config = peft.LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    try:
        return peft.get_peft_model(model, config)
    except ValueError as exc:  # peft's message names the missing modules
        raise ConfigError(f"LoRA target modules {list(target_modules)} do not fit this model: {exc}") from exc


def is_lora_model(model: torch.nn.Module) -> bool:
    """True when ``model`` carries peft LoRA adapters."""
    return any(_is_lora_layer(m) for m in model.modules())


def _is_lora_layer(module: torch.nn.Module) -> bool:
    return hasattr(module, "get_delta_weight") and hasattr(module, "lora_A")


@torch.no_grad()
def merged_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{name.weight: W + delta}`` for every LoRA-adapted layer of the peft ``model``, with names
    as in the base model's ``state_dict()``; the training model is left as it is."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if not _is_lora_layer(module):
            continue
        weight = module.get_base_layer().weight
        merged = weight.detach().clone()
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                merged += module.get_delta_weight(adapter).to(merged.dtype)
        out[f"{name}.weight"] = merged
    if not out:
        raise ConfigError("merged_weights: the model has no LoRA layers (was apply_lora called?)")
    return out


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole base model's ``state_dict()`` as a plain model names it, the LoRA-adapted layers
    merged (:func:`merged_weights`): for a sampler that must get every weight at once (vLLM
    corrupts a fused q/k/v or gate/up group loaded in part)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = tensor
    out.update(merged_weights(model))
    return out


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA adapters' tensors of the peft ``model`` under peft's file names
    (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``), as ``save_pretrained``
    writes them: what vLLM's LoRA loading reads."""
    peft: Any = require("peft", "training", "LoRA")
    return dict(peft.get_peft_model_state_dict(model))


def adapter_config(model: torch.nn.Module) -> dict[str, Any]:
    """The peft ``model``'s ``adapter_config.json`` as a dict (target modules as peft resolved
    them: ``all-linear`` is the list of layer names)."""
    import enum
    import json

    def plain(value: Any) -> Any:
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        if isinstance(value, enum.Enum):
            return value.value
        raise TypeError(f"{type(value).__name__} in a LoRA config")

    config = model.peft_config["default"]  # type: ignore[index, union-attr]
    return dict(json.loads(json.dumps(config.to_dict(), default=plain)))
