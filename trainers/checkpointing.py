"""Activation checkpointing of a decoder's layers that keeps the trainer's shared-prefix KV cache.

Without it a train step keeps every layer's activations of every computed token until the
backward: about 1.5 MB a token for SmolLM2-135M under bf16 autocast (``python
bench/bench_memory.py --trainer``), so a micro-batch of 8,192 tokens holds about 12 GB. With it
each layer keeps only its input and recomputes the rest in the backward, one layer at a time
(one more forward: the time it costs is measured by the same benchmark).

Transformers' own switch (``gradient_checkpointing_enable``) turns the KV cache off inside
checkpointed layers, and :func:`trainers.logprobs.forward_logprobs` runs a group's shared prompt
once and its suffixes over that prompt's cache. So the layers are wrapped here instead, with
:func:`torch.utils.checkpoint.checkpoint` (non-reentrant): before a layer runs, and again before
its recompute, its cache layer is cut back to the length it had when the forward first reached
it, so the recompute appends the same keys and values to the same past and sees what the
forward saw (the saved tensors match; gradients flow along the first forward's graph).

Only a forward with gradient in training mode is checkpointed; a forward under ``no_grad``
(old logprobs, the sampler) runs the layer as it is.

**Recomputing only the cheap parts** (:func:`enable_elementwise_recompute`, on by default, see
``OptimizerConfig.recompute_elementwise``). Most of what a layer keeps is kept by elementwise
ops that cost nothing to run again: each RMSNorm keeps two float32 copies of its input's width
(``8 h`` bytes a token), and the gated MLP keeps ``act(gate)`` and ``up`` for its product besides
``gate`` for the activation. Checkpointing just those (the two norms, and ``act(gate) * up`` given
``gate`` and ``up``) keeps each norm's input and the MLP's two projections' outputs instead:
``8 h + 2 i`` bytes a token less per layer, 22% of SmolLM2-135M's, with no matrix product run
twice. Logprobs and gradients are bit for bit the plain forward's (the same ops run again).
A layer checkpointed whole is left alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from skyrl_gym.errors import ConfigError

__all__ = [
    "enable_activation_checkpointing",
    "checkpointed_layers",
    "enable_elementwise_recompute",
    "recomputed_parts",
]

#: Set on the checkpointed subclasses: in eval mode or without gradient their ``forward`` is
#: the base class's (the sampler's written-out decode step reads it to accept such a layer).
_MARK = "skyrl_checkpointed"
#: Set on the subclasses of :func:`enable_elementwise_recompute` (a norm or an MLP).
_PART = "skyrl_recomputed_part"


def _layers_of(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder's layers: the modules whose attention knows its ``layer_idx``."""
    return [
        m
        for m in model.modules()
        if isinstance(getattr(getattr(m, "self_attn", None), "layer_idx", None), int)
    ]


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """:func:`_layers_of`, or a :class:`ConfigError` when there are none."""
    layers = _layers_of(model)
    if not layers:
        raise ConfigError(
            f"activation checkpointing found no decoder layers in {type(model).__name__} (modules with "
            "self_attn.layer_idx, as transformers' decoders have): turn --activation-checkpointing off"
        )
    return layers


def _cache_of(kwargs: dict[str, Any]) -> Any:
    """The KV cache a decoder layer was called with (``cache``, or ``past_key_values`` before
    transformers 5.2x), or ``None``."""
    cache = kwargs.get("cache")
    return cache if cache is not None else kwargs.get("past_key_values")


def _cache_layer(cache: Any, index: int) -> Any:
    """``cache``'s layer ``index`` when it is one this module can cut back (a dynamic layer
    that grows by concatenation), else a :class:`ConfigError`."""
    layers = getattr(cache, "layers", None)
    layer = layers[index] if layers is not None and index < len(layers) else None
    if layer is None or getattr(layer, "is_sliding", False) or not hasattr(layer, "keys"):
        raise ConfigError(
            f"activation checkpointing cannot restore a {type(cache).__name__} cache (only dynamic, "
            "non-sliding layers): turn --activation-checkpointing off for this model"
        )
    return layer


def _length(layer: Any) -> int:
    if not getattr(layer, "is_initialized", False) or layer.keys is None:
        return 0
    return int(layer.keys.shape[-2])


def _cut(layer: Any, length: int) -> None:
    """Cut ``layer``'s keys and values back to their first ``length`` positions (to none: the
    layer starts afresh, since its batch may have been repeated after the forward)."""
    if length == 0 and getattr(layer, "is_initialized", False):
        layer.reset()
    elif _length(layer) > length:
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


_classes: dict[type, type] = {}


def _checkpointed_class(base: type) -> type:
    """``base`` with a ``forward`` that checkpoints itself in training mode under autograd (one
    subclass per base class). A subclass rather than a wrapper on the instance: a copy of the
    model (``copy.deepcopy``, as the sampler's bf16 copy is made) then runs its own layers with
    its own attention settings, not the original's."""
    if base in _classes:
        return _classes[base]

    def forward(self: torch.nn.Module, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        plain = super(cls, self).forward
        if not (self.training and torch.is_grad_enabled()):
            return plain(hidden_states, *args, **kwargs)
        cache = _cache_of(kwargs)
        cache_layer = _cache_layer(cache, int(self.self_attn.layer_idx)) if cache is not None else None
        length = _length(cache_layer) if cache_layer is not None else 0

        def run(h: torch.Tensor) -> Any:
            if cache_layer is not None:  # the recompute appends to the past the forward saw
                _cut(cache_layer, length)
            return plain(h, *args, **kwargs)

        return checkpoint(run, hidden_states, use_reentrant=False)

    cls = type(
        f"Checkpointed{base.__name__}", (base,), {"forward": forward, _MARK: True, "__module__": __name__}
    )
    _classes[base] = cls
    return cls


def enable_activation_checkpointing(model: torch.nn.Module) -> int:
    """Checkpoint every decoder layer of ``model`` (for good; idempotent). Returns how many
    layers are checkpointed."""
    layers = _decoder_layers(model)
    for layer in layers:
        if not getattr(type(layer), _MARK, False):
            layer.__class__ = _checkpointed_class(type(layer))
    return len(layers)


def checkpointed_layers(model: torch.nn.Module) -> int:
    """How many of ``model``'s modules are checkpointed by :func:`enable_activation_checkpointing`."""
    return sum(1 for m in model.modules() if getattr(type(m), _MARK, False))


# ---------------------------------------------------------------------------- the cheap parts
def _gate_times_up(act: torch.nn.Module, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return act(gate) * up


_part_classes: dict[tuple[type, str], type] = {}


def _recomputed_class(base: type, kind: str) -> type:
    """``base`` (a norm, or a gated MLP: ``kind``) whose forward, in training mode under autograd,
    keeps only what the module's matrix products need and runs its elementwise ops again in the
    backward (one subclass per base class and kind, as :func:`_checkpointed_class`)."""
    if (base, kind) in _part_classes:
        return _part_classes[(base, kind)]

    def norm_forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        plain = super(cls, self).forward
        if not (self.training and torch.is_grad_enabled()):
            return plain(hidden_states)
        return checkpoint(plain, hidden_states, use_reentrant=False, preserve_rng_state=False)

    def mlp_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return super(cls, self).forward(x)
        return _mlp_in_parts(self, x, recompute=True)

    forward = norm_forward if kind == "norm" else mlp_forward
    cls = type(
        f"Recomputed{base.__name__}", (base,), {"forward": forward, _PART: kind, "__module__": __name__}
    )
    _part_classes[(base, kind)] = cls
    return cls


def _mlp_in_parts(mlp: torch.nn.Module, x: torch.Tensor, recompute: bool) -> torch.Tensor:
    """``down(act(gate(x)) * up(x))``, the product checkpointed when ``recompute``."""
    gate, up = mlp.gate_proj(x), mlp.up_proj(x)
    if recompute:
        prod = checkpoint(_gate_times_up, mlp.act_fn, gate, up, use_reentrant=False, preserve_rng_state=False)
    else:
        prod = _gate_times_up(mlp.act_fn, gate, up)
    return mlp.down_proj(prod)


def _is_gated_mlp(mlp: torch.nn.Module) -> bool:
    """Whether ``mlp``'s own forward is ``down(act(gate(x)) * up(x))``: it has those four parts
    and gives exactly that on a small input (an MLP with other steps is left alone)."""
    parts = ("gate_proj", "up_proj", "down_proj", "act_fn")
    if not all(isinstance(getattr(mlp, p, None), torch.nn.Module) for p in parts):
        return False
    weight = getattr(mlp.gate_proj, "weight", None)
    width = getattr(mlp.gate_proj, "in_features", None)
    if not isinstance(weight, torch.Tensor) or not isinstance(width, int) or weight.device.type == "meta":
        return False
    was = mlp.training
    try:
        mlp.eval()
        with torch.no_grad():
            gen = torch.Generator(device=weight.device).manual_seed(0)  # the global RNG stays as it was
            x = torch.randn(1, 2, width, dtype=weight.dtype, device=weight.device, generator=gen)
            return torch.equal(mlp(x), _mlp_in_parts(mlp, x, recompute=False))
    except Exception:  # noqa: BLE001 - a module this cannot call is simply not recomputed
        return False
    finally:
        mlp.train(was)


def enable_elementwise_recompute(model: torch.nn.Module) -> int:
    """Recompute each decoder layer's norms and its gated MLP's ``act(gate) * up`` in the backward
    instead of keeping their intermediate tensors (module docstring; for good, idempotent).
    Layers checkpointed whole, parts of another shape and models without decoder layers are
    left as they are. Returns how many parts (norms and MLPs) are recomputed."""
    for layer in _layers_of(model):
        if getattr(type(layer), _MARK, False):
            continue
        for name in ("input_layernorm", "post_attention_layernorm"):
            norm = getattr(layer, name, None)
            if isinstance(norm, torch.nn.Module) and not getattr(type(norm), _PART, None):
                norm.__class__ = _recomputed_class(type(norm), "norm")
        mlp = getattr(layer, "mlp", None)
        if isinstance(mlp, torch.nn.Module) and not getattr(type(mlp), _PART, None) and _is_gated_mlp(mlp):
            mlp.__class__ = _recomputed_class(type(mlp), "mlp")
    return sum(recomputed_parts(model).values())


def recomputed_parts(model: torch.nn.Module) -> dict[str, int]:
    """How many norms and MLPs of ``model`` :func:`enable_elementwise_recompute` recomputes."""
    counts = {"norm": 0, "mlp": 0}
    for m in model.modules():
        kind = getattr(type(m), _PART, None)
        if kind in counts:
            counts[kind] += 1
    return counts
