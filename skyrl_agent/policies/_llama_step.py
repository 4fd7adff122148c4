"""One decode step of a Llama-layout model, written out over its modules' weights.

A decode step through transformers' module stack spends, for the bundled 135M model on this
project's 2-core machine, about a third of its time outside the arithmetic: thirty decoder
layers, each a chain of ``nn.Module`` calls with keyword plumbing, decorators (output capture,
deprecated-argument renames, hub-kernel lookups), a ``Cache`` object per layer and a mask
builder per step. :class:`LlamaDecodeStep` runs the same operations in the same order and
dtypes, one token per row, directly on the weights: the embedding, per layer the RMS norm, the
query/key/value projections, the rotary embedding (the model's own ``rotary_emb`` module), the
attention function the model's config names (transformers' ``AttentionInterface``, so SDPA,
the engine's cascade attention or the opt-in matmul attention exactly as the module would call
it), the output projection, the residuals, the MLP; then the final norm and the output head.
Under the caller's autocast its logits are bit for bit the module's
(``tests/agent/test_llama_step.py`` checks it against ``model.forward`` on the engine's own
caches); what it saves is interpreter time.

It applies to ``LlamaForCausalLM`` with the plain layout (no biases, SiLU MLP, no pretraining
tensor parallelism, no hooks on its modules): :meth:`LlamaDecodeStep.build` returns None for
anything else, and the engine keeps calling the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["LlamaDecodeStep"]

#: ``write(layer, keys, values)`` stores one step's ``[B, kv_heads, 1, head_dim]`` keys and
#: values and returns the keys and values that layer's attention reads.
WriteKV = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _plain_llama(model: Any) -> bool:
    """Whether ``model`` is a ``LlamaForCausalLM`` whose decode step this module reproduces."""
    if type(model).__name__ != "LlamaForCausalLM" or hasattr(model, "peft_config"):
        return False
    cfg = model.config
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return False
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    for mod in model.modules():  # hooks would be skipped by calling weights directly
        if mod._forward_hooks or mod._forward_pre_hooks:
            return False
    layers = model.model.layers
    if len(layers) != cfg.num_hidden_layers or type(model.lm_head) is not torch.nn.Linear:
        return False
    for layer in layers:  # an adapter (LoRA) replaces a projection by its own module
        attn, mlp = layer.self_attn, layer.mlp
        projections = (
            attn.q_proj,
            attn.k_proj,
            attn.v_proj,
            attn.o_proj,
            mlp.gate_proj,
            mlp.up_proj,
            mlp.down_proj,
        )
        # a trainer's checkpointed subclass computes its base's forward without gradient
        cls = type(layer).__mro__[1] if getattr(type(layer), "skyrl_checkpointed", False) else type(layer)
        if cls.__name__ != "LlamaDecoderLayer" or any(type(p) is not torch.nn.Linear for p in projections):
            return False
    return True


class LlamaDecodeStep:
    """The decode step of one Llama model (see the module docstring). Holds references to the
    model's parameters, so weight updates in place (the engine's refresh of its bf16 copy) are
    seen without rebuilding."""

    def __init__(self, model: Any) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        self.model = model
        cfg = model.config
        self.config = cfg
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.final_norm = (inner.norm.weight, inner.norm.variance_epsilon)
        self.head = model.lm_head.weight
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    attn,
                    (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
                    attn.q_proj.weight,
                    attn.k_proj.weight,
                    attn.v_proj.weight,
                    attn.o_proj.weight,
                    (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon),
                    mlp.gate_proj.weight,
                    mlp.up_proj.weight,
                    mlp.down_proj.weight,
                )
            )
        self.head_dim = self.layers[0][0].head_dim
        self._functions = ALL_ATTENTION_FUNCTIONS

    @classmethod
    def build(cls, model: Any) -> LlamaDecodeStep | None:
        """The step for ``model``, or None when it is not a plain ``LlamaForCausalLM``."""
        return cls(model) if _plain_llama(model) else None

    @staticmethod
    def _norm(x: torch.Tensor, weight_eps: tuple[torch.Tensor, float]) -> torch.Tensor:
        """``LlamaRMSNorm.forward``, operation for operation."""
        weight, eps = weight_eps
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + eps)
        return weight * x.to(dtype)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def __call__(
        self, tokens_B1: torch.Tensor, pos_B1: torch.Tensor, write: WriteKV, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Logits ``[B, vocab]`` for one new token per row (``tokens_B1``, ``pos_B1``: ``[B, 1]``);
        ``mask``: what the model's attention function takes for the step (``[B, 1, 1, L]``)."""
        F = torch.nn.functional
        attention = self._functions[self.config._attn_implementation]
        B, D = tokens_B1.shape[0], self.head_dim
        h_B1C = self.embed(tokens_B1)
        cos_B1D, sin_B1D = self.rotary(h_B1C, pos_B1)
        cos_B11D, sin_B11D = cos_B1D[:, None], sin_B1D[:, None]
        for i, (attn, n1, wq, wk, wv, wo, n2, wg, wu, wd) in enumerate(self.layers):
            x = self._norm(h_B1C, n1)
            q_BH1D = F.linear(x, wq).view(B, 1, -1, D).transpose(1, 2)
            k_BK1D = F.linear(x, wk).view(B, 1, -1, D).transpose(1, 2)
            v_BK1D = F.linear(x, wv).view(B, 1, -1, D).transpose(1, 2)
            q_BH1D = q_BH1D * cos_B11D + self._rotate_half(q_BH1D) * sin_B11D
            k_BK1D = k_BK1D * cos_B11D + self._rotate_half(k_BK1D) * sin_B11D
            keys, values = write(i, k_BK1D, v_BK1D)
            out_B1HD, _ = attention(attn, q_BH1D, keys, values, mask, dropout=0.0, scaling=attn.scaling)
            h_B1C = h_B1C + F.linear(out_B1HD.reshape(B, 1, -1).contiguous(), wo)
            x = self._norm(h_B1C, n2)
            h_B1C = h_B1C + F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
        h_B1C = self._norm(h_B1C, self.final_norm)
        return F.linear(h_B1C, self.head)[:, -1, :]
