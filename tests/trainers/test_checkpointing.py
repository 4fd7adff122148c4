"""Activation checkpointing (trainers.checkpointing) computes the same logprobs and gradients as
the plain forward on every path of the trainer's forward: no shared prefix, the shared prefix
over a repeated cache (eager attention), packed suffixes as blocks and split at the prefix; and
it does recompute (fewer tensors are saved for the backward)."""

import pytest
import torch

from trainers.checkpointing import checkpointed_layers, enable_activation_checkpointing
from trainers.logprobs import forward_logprobs, shared_prefix_len

from .test_packed import _batch, _lm, _logprobs_and_grads


def _saved_bytes(model, ids_BT, attn_BT, mask_BT, prefix):
    """Bytes of the tensors autograd keeps for the backward of one forward."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward_logprobs(model, ids_BT, attn_BT, mask_BT=mask_BT, prefix_len=prefix)
    out.logprobs_BT.sum().backward()
    return total[0]


@pytest.mark.parametrize(
    ("attn", "shared", "split", "bf16"),
    [
        ("sdpa", False, True, False),
        ("eager", True, True, False),
        ("sdpa", True, False, False),
        ("sdpa", True, True, False),
        ("sdpa", True, True, True),
    ],
)
def test_checkpointed_equals_plain(attn, shared, split, bf16, monkeypatch):
    import trainers._packed

    monkeypatch.setattr(trainers._packed, "SPLIT_PREFIX", split)
    ids_BT, attn_BT, mask_BT = _batch()
    P = shared_prefix_len(ids_BT, mask_BT) if shared else 0
    plain = _lm(attn).train()
    lp0, g0 = _logprobs_and_grads(plain, ids_BT, attn_BT, mask_BT, P, bf16=bf16)
    model = _lm(attn).train()
    assert enable_activation_checkpointing(model) == 2
    assert enable_activation_checkpointing(model) == 2  # idempotent: not wrapped twice
    assert checkpointed_layers(model) == 2
    lp, g = _logprobs_and_grads(model, ids_BT, attn_BT, mask_BT, P, bf16=bf16)
    assert lp0.abs().sum() > 0
    assert torch.equal(lp, lp0)
    for k in g0:
        assert torch.allclose(g[k], g0[k], atol=1e-6, rtol=1e-5), k
    # and the same again (the cache cut back on recompute leaves nothing behind for the next call)
    lp2, g2 = _logprobs_and_grads(model, ids_BT, attn_BT, mask_BT, P, bf16=bf16)
    assert torch.equal(lp2, lp)
    for k in g:
        assert torch.equal(g2[k], g[k]), k


def test_checkpointing_saves_less_and_leaves_no_grad_forwards_alone():
    ids_BT, attn_BT, mask_BT = _batch(lengths=(60, 41, 57, 30, 64), prefix=9)
    P = shared_prefix_len(ids_BT, mask_BT)
    plain = _lm().train()
    model = _lm().train()
    enable_activation_checkpointing(model)
    full, ckpt = (
        _saved_bytes(plain, ids_BT, attn_BT, mask_BT, P),
        _saved_bytes(model, ids_BT, attn_BT, mask_BT, P),
    )
    assert ckpt < 0.6 * full, (ckpt, full)
    with torch.no_grad():  # old logprobs, the sampler: the layer as it is
        a = forward_logprobs(model.eval(), ids_BT, attn_BT, mask_BT=mask_BT, prefix_len=P).logprobs_BT
        b = forward_logprobs(plain.eval(), ids_BT, attn_BT, mask_BT=mask_BT, prefix_len=P).logprobs_BT
    assert torch.equal(a, b)


def test_a_model_without_decoder_layers_is_refused():
    from skyrl_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="activation-checkpointing"):
        enable_activation_checkpointing(torch.nn.Linear(3, 3))


def test_a_copy_of_a_checkpointed_model_runs_its_own_layers():
    """The sampler's bf16 copy is a deepcopy of the trained model: its layers must compute with
    the copy's weights and settings, not call back into the original's (a wrapper on the
    instance did, and the sampler then attended without its own attention function)."""
    import copy

    ids_BT, attn_BT, _ = _batch()
    model = _lm()
    enable_activation_checkpointing(model)
    twin = copy.deepcopy(model)
    assert checkpointed_layers(twin) == 2
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
        plain = copy.deepcopy(_lm())
        for p in plain.parameters():
            p.mul_(0.5)
        got = twin(input_ids=ids_BT, attention_mask=attn_BT).logits
        want = plain(input_ids=ids_BT, attention_mask=attn_BT).logits
        orig = model(input_ids=ids_BT, attention_mask=attn_BT).logits
    assert torch.equal(got, want) and not torch.allclose(got, orig)


def test_the_sampler_decodes_a_checkpointed_model_with_its_written_out_step():
    from skyrl_agent.policies._llama_step import LlamaDecodeStep

    model = _lm()
    assert LlamaDecodeStep.build(model) is not None
    enable_activation_checkpointing(model)
    assert LlamaDecodeStep.build(model) is not None  # eval mode, no gradient: the base forward


# ------------------------------------------------------------------ recomputing only the cheap parts
@pytest.mark.parametrize(
    ("attn", "shared", "bf16"),
    [("sdpa", False, False), ("eager", True, False), ("sdpa", True, False), ("sdpa", True, True)],
)
def test_elementwise_recompute_gives_the_same_logprobs_and_gradients_bit_for_bit(attn, shared, bf16):
    from trainers.checkpointing import enable_elementwise_recompute, recomputed_parts

    ids_BT, attn_BT, mask_BT = _batch()
    P = shared_prefix_len(ids_BT, mask_BT) if shared else 0
    plain = _lm(attn).train()
    lp0, g0 = _logprobs_and_grads(plain, ids_BT, attn_BT, mask_BT, P, bf16=bf16)
    model = _lm(attn).train()
    assert enable_elementwise_recompute(model) == 6  # 2 layers x (2 norms + the MLP)
    assert enable_elementwise_recompute(model) == 6  # idempotent
    assert recomputed_parts(model) == {"norm": 4, "mlp": 2}
    lp, g = _logprobs_and_grads(model, ids_BT, attn_BT, mask_BT, P, bf16=bf16)
    assert lp0.abs().sum() > 0 and torch.equal(lp, lp0)
    assert g.keys() == g0.keys()
    for k in g0:
        assert torch.equal(g[k], g0[k]), k


def test_elementwise_recompute_keeps_8h_plus_2i_bytes_a_token_less_per_layer():
    """What the module docstring counts: each norm keeps its float32 input instead of two float32
    copies (4 h bytes a token less each) and no longer its inverse root (4 bytes a token) or its
    weight (4 h bytes), the MLP its two projections' outputs instead of also act(gate) (2 i less,
    bf16); nothing else moves. Under bf16 autocast, as the trainer runs."""
    from trainers.checkpointing import enable_elementwise_recompute

    ids_BT, attn_BT, mask_BT = _batch(lengths=(60, 41, 57, 30, 64), prefix=0)
    computed = int(attn_BT.numel())  # no shared prefix: every position of the padded batch runs

    def saved(model):  # each kept storage once (several ops may keep one tensor)
        total, seen = [0], set()

        def pack(t):
            if t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total[0] += t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = forward_logprobs(model, ids_BT, attn_BT, mask_BT=mask_BT, prefix_len=0, bf16=True)
        out.logprobs_BT.sum().backward()
        return total[0]

    plain, model = _lm().train(), _lm().train()
    enable_elementwise_recompute(model)
    h, i, layers = 32, 64, 2
    assert saved(plain) - saved(model) == layers * (computed * (8 * h + 2 * i + 2 * 4) + 2 * 4 * h)


def test_elementwise_recompute_leaves_no_grad_forwards_whole_layers_and_other_mlps_alone():
    import copy

    from skyrl_agent.policies._llama_step import LlamaDecodeStep
    from trainers.checkpointing import enable_elementwise_recompute, recomputed_parts

    ids_BT, attn_BT, mask_BT = _batch()
    model = _lm()
    enable_elementwise_recompute(model)
    assert LlamaDecodeStep.build(model) is not None  # the sampler's written-out step still takes it
    twin = copy.deepcopy(model)
    assert recomputed_parts(twin) == {"norm": 4, "mlp": 2}
    with torch.no_grad():
        assert torch.equal(twin(input_ids=ids_BT).logits, _lm()(input_ids=ids_BT).logits)

    whole = _lm()
    enable_activation_checkpointing(whole)
    assert enable_elementwise_recompute(whole) == 0  # already recomputed whole, layer by layer
    assert enable_elementwise_recompute(torch.nn.Linear(3, 3)) == 0  # nothing to do, no error

    class ScaledMLP(torch.nn.Module):  # the four parts, another forward: must not be rewritten
        def __init__(self, mlp):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj, self.act_fn = (
                mlp.gate_proj,
                mlp.up_proj,
                mlp.down_proj,
                mlp.act_fn,
            )

        def forward(self, x):
            return 2 * self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    other = _lm()
    for layer in other.model.layers:
        layer.mlp = ScaledMLP(layer.mlp)
    state = torch.get_rng_state()
    assert enable_elementwise_recompute(other) == 4  # the norms only
    assert torch.equal(torch.get_rng_state(), state)  # the check's input drew from its own generator
    assert all(type(layer.mlp) is ScaledMLP for layer in other.model.layers)
