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
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from skyrl_gym.errors import ConfigError

__all__ = ["enable_activation_checkpointing", "checkpointed_layers"]

#: Set on the checkpointed subclasses: in eval mode or without gradient their ``forward`` is
#: the base class's (the sampler's written-out decode step reads it to accept such a layer).
_MARK = "skyrl_checkpointed"


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder's layers: the modules whose attention knows its ``layer_idx``."""
    layers = [
        m
        for m in model.modules()
        if isinstance(getattr(getattr(m, "self_attn", None), "layer_idx", None), int)
    ]
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
