"""The train step's activation budget (``train_memory_gb``): the per-token estimate and the
micro-batches it bounds."""

import pytest
import torch

from skyrl_gym.errors import ConfigError
from trainers.checkpointing import enable_activation_checkpointing
from trainers.config import TrainConfig
from trainers.memory import FLOAT32_PER_BF16, RESIDENT_PER_COUNTED, activation_bytes_per_token
from trainers.step import micro_batch_token_bound, micro_batches

from .test_step import grads_after_step, make_batch, tiny_lm


def test_the_estimate_counts_a_llama_layer_by_hand():
    """tiny_lm: hidden 32, intermediate 64, 2 layers, 2 key/value heads of 8: one layer keeps
    36*32 + 8*16 + 8*64 = 1,792 bytes a token under bf16 autocast; checkpointed, each layer its
    float32 input and KV (4*32 + 4*16 = 192) plus three layers' worth for the recompute."""
    model = tiny_lm()
    assert activation_bytes_per_token(model, bf16=True) == int(2 * 1792 * RESIDENT_PER_COUNTED[False])
    assert activation_bytes_per_token(model, bf16=False) == int(
        2 * 1792 * RESIDENT_PER_COUNTED[False] * FLOAT32_PER_BF16
    )
    enable_activation_checkpointing(model)
    assert activation_bytes_per_token(model, bf16=True) == int(
        (2 * 192 + 3 * 1792) * RESIDENT_PER_COUNTED[True]
    )


def test_the_estimate_leaves_out_what_the_elementwise_recompute_does_not_keep():
    """Per layer 4 h less for each of the two norms and 2 i for the MLP: 1,792 - 256 - 128."""
    from trainers.checkpointing import enable_elementwise_recompute

    model = tiny_lm()
    assert enable_elementwise_recompute(model) == 6
    assert activation_bytes_per_token(model, bf16=True) == int(2 * 1408 * RESIDENT_PER_COUNTED[False])


def test_the_estimate_is_zero_without_the_sizes():
    assert activation_bytes_per_token(torch.nn.Linear(4, 4)) == 0


def test_the_budget_bounds_the_micro_batches_and_leaves_the_gradient():
    model = tiny_lm()
    per_token = activation_bytes_per_token(model, bf16=False)
    budget_gb = 16.5 * per_token / 1e9  # 16 tokens
    cfg = TrainConfig(bf16=False, micro_batch_tokens=0, train_memory_gb=budget_gb)
    assert micro_batch_token_bound(model, cfg) == 16
    assert micro_batch_token_bound(model, cfg.replace(micro_batch_tokens=8)) == 8  # the smaller bound
    assert micro_batch_token_bound(model, cfg.replace(train_memory_gb=0)) == 0  # neither: no bound
    assert micro_batch_token_bound(model, cfg.replace(train_memory_gb=0, micro_batch_tokens=12)) == 12
    assert micro_batch_token_bound(model, cfg.replace(train_memory_gb=1e-12)) == 1  # at least a token
    assert len(micro_batches(make_batch(), 5, 16)) == 3
    full, s1 = grads_after_step(5)
    budgeted, s2 = grads_after_step(5, train_memory_gb=budget_gb)
    assert s2.micro_batches == 3 and s1.micro_batches == 1
    for name in full:
        assert torch.allclose(full[name], budgeted[name], atol=1e-6, rtol=1e-4), name


def test_the_main_job_default_leaves_its_micro_batches_whole():
    """SmolLM2-135M's shape under bf16: the 8 GB default holds more than the main job's largest
    micro-batch (3,977 computed tokens in a seed-0 run), so its split is as before."""
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    bound = micro_batch_token_bound(model, TrainConfig(bf16=True))
    assert 3977 < bound < 8192


def test_a_negative_budget_is_refused():
    with pytest.raises(ConfigError, match="train_memory_gb"):
        TrainConfig(train_memory_gb=-1)
