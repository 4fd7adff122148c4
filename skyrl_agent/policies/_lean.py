"""The sampler's bf16 copy of a model's linear weights, for decoding under bf16 autocast.

Under ``torch.autocast(dtype=torch.bfloat16)`` every linear layer casts its float32 weight to
bf16 again at every call: for one decode step of the bundled 135M model that is the whole model
read and written once more: in ``bench/bench_attention.py`` on this project's 2-core machine
the copy took a step of 32 rows from 132 to 96 ms (minima). :class:`LeanCopy` keeps a second module whose linear weights
(the output head included, untied from the embedding) are already bf16 and whose other
parameters (embedding, norms) stay float32. Autocast's cast of a bf16 tensor to bf16 is a no-op
and its result is bit for bit the cast it replaces, so the copy computes exactly what the
float32 module computes under autocast, logits and logprobs included.

The float32 module stays the master (the trainer's optimizer steps it); :meth:`LeanCopy.refresh`
copies its current values over (about 0.1 s for 135M parameters), and the engine calls it when
it sees the master's weights change.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["LeanCopy", "lean_copy_applies"]


def lean_copy_applies(model: Any, autocast_bf16: bool) -> bool:
    """Whether :class:`LeanCopy` fits ``model``: bf16 autocast on, float32 weights on CPU, a
    plain transformers model (not wrapped by PEFT, whose adapters train in place)."""
    if not autocast_bf16 or hasattr(model, "peft_config"):
        return False
    try:
        p = next(model.parameters())
    except (StopIteration, AttributeError):
        return False
    return p.device.type == "cpu" and p.dtype == torch.float32


class LeanCopy:
    """A copy of ``master`` with bf16 linear weights; :attr:`module` runs, ``master`` trains."""

    def __init__(self, master: torch.nn.Module) -> None:
        self.master = master
        lean = copy.deepcopy(master).eval().requires_grad_(False)
        for mod in lean.modules():
            if isinstance(mod, torch.nn.Linear):
                # a new Parameter: a head tied to the embedding is untied here, the embedding
                # (read by the residual stream) keeps float32
                mod.weight = torch.nn.Parameter(mod.weight.detach().to(torch.bfloat16), requires_grad=False)
        self.module = lean
        src = dict(master.named_parameters(remove_duplicate=False))
        dst = dict(lean.named_parameters(remove_duplicate=False))
        missing = sorted(set(dst) - set(src))
        if missing:
            raise RuntimeError(f"LeanCopy: parameters {missing[:3]} of the copy have no source")
        self._pairs = [(src[name], dst[name]) for name in dst]

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the master's current weights over (cast to each copy tensor's dtype)."""
        for s, d in self._pairs:
            d.copy_(s)
