"""LoRA through peft: only adapters train, a step lowers the loss, and the sampler sees the update."""

import copy

import pytest
import torch

from skyrl_agent.policies.hf import HFPolicy
from skyrl_agent.types import GenerateRequest, SamplingParams
from tests.trainers.test_step import make_batch, tiny_lm
from trainers.config import TrainConfig
from trainers.logprobs import token_logprobs
from trainers.lora import apply_lora, is_lora_model, merged_weights
from trainers.losses import ppo_clip_loss
from trainers.step import train_step


class _Tok:
    """Just enough tokenizer for HFPolicy over the 40-token tiny model (no stop strings used)."""

    eos_token_id = 39
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def lora_model(rank=4, targets=("all-linear",)):
    return apply_lora(tiny_lm(), rank=rank, alpha=8, target_modules=targets)


def train_a_few_steps(model, steps=3, lr=5e-2):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    cfg = TrainConfig(micro_batch_size=3, bf16=False, lora_rank=4)
    batch = make_batch()
    for _ in range(steps):
        train_step(model, opt, batch, cfg)
    return batch


def test_only_adapter_parameters_change():
    model = lora_model()
    assert is_lora_model(model)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    train_a_few_steps(model)
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert changed and changed <= trainable  # every change is an adapter's
    assert any("lora_B" in k for k in changed)  # B starts at zero and moved off it


def test_a_train_step_lowers_the_policy_loss():
    model = lora_model()
    batch = make_batch()
    old_BT, _ = token_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT, mask_BT=batch.mask_BT)

    def surrogate() -> float:
        with torch.no_grad():
            lp_BT, _ = token_logprobs(
                model, batch.input_ids_BT, batch.attention_mask_BT, mask_BT=batch.mask_BT
            )
        return float(ppo_clip_loss(lp_BT, old_BT, batch.advantages_BT, batch.mask_BT)[0])

    start = surrogate()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-2)
    train_step(model, opt, batch, TrainConfig(micro_batch_size=5, bf16=False, grad_clip=0.0))
    assert surrogate() < start - 1e-3


def test_target_modules_flag_limits_the_adapters():
    model = lora_model(targets=("q_proj", "v_proj"))
    adapted = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == {"q_proj", "v_proj"}
    with pytest.raises(ValueError, match="target modules"):
        lora_model(targets=("no_such_layer",))


def _sample_and_score(policy, trained):
    """Sample from ``policy``; return its rollout logprobs, and the logprobs of the same ids under
    ``trained`` and under ``trained`` with its adapters off (the starting model)."""
    prompt = [5, 6, 7, 8]
    out = policy.generate_sync(
        [GenerateRequest(prompt, SamplingParams(temperature=1.0, max_tokens=6, seed=3))]
    )[0]
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        lp_BT, _ = token_logprobs(trained, ids, torch.ones_like(ids))
        with trained.disable_adapter():
            base_BT, _ = token_logprobs(trained, ids, torch.ones_like(ids))
    return torch.tensor(out.logprobs), lp_BT[0, len(prompt) :], base_BT[0, len(prompt) :]


@pytest.mark.parametrize("merge", [True, False])
def test_the_rollout_policy_sees_the_trained_adapters(merge):
    base = tiny_lm()
    sampler_model = copy.deepcopy(base).eval() if merge else None
    model = apply_lora(base, rank=4, alpha=8)
    policy = HFPolicy(sampler_model if merge else model, _Tok(), seed=0)
    before, trained_before, _ = _sample_and_score(policy, model)
    assert torch.allclose(before, trained_before, atol=1e-4)  # LoRA starts as the base model
    train_a_few_steps(model)
    if merge:  # what the loop does after every update with lora_merge
        synced = merged_weights(model)
        assert set(synced) <= set(sampler_model.state_dict())
        assert policy.update_weights(synced) == len(synced)
    rollout, trainer_view, base_view = _sample_and_score(policy, model.eval())
    # the sampler's logprobs are the trained model's on the tokens it sampled ...
    assert torch.allclose(rollout, trainer_view, atol=1e-4)
    # ... and no longer the starting model's
    assert (rollout - base_view).abs().max() > 1e-2
    policy.close()


def test_merged_weights_leave_the_training_model_alone():
    model = lora_model()
    train_a_few_steps(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = merged_weights(model)
    assert all(k.endswith(".weight") and "lora" not in k and "base_layer" not in k for k in merged)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_the_merged_state_dict_is_every_weight_of_the_plain_model():
    """What a vLLM sampler gets with LoRA: the plain model's every name, the adapted layers merged
    and the rest as they are (vLLM corrupts a fused group loaded in part)."""
    from trainers.lora import merged_state_dict

    plain = tiny_lm().state_dict()
    model = apply_lora(tiny_lm(), rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    train_a_few_steps(model)
    whole = merged_state_dict(model)
    assert set(whole) == set(plain)
    merged = merged_weights(model)
    assert merged and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in merged)
    assert all(torch.equal(whole[k], v) for k, v in merged.items())
    unadapted = [k for k in plain if k not in merged]
    assert any("k_proj" in k for k in unadapted)
    assert all(torch.equal(whole[k], plain[k]) for k in unadapted)  # frozen, as they started


def test_the_adapters_and_their_config_as_peft_writes_them(tmp_path):
    """What vLLM's LoRA loading gets: the tensors and ``adapter_config.json`` that peft's own
    ``save_pretrained`` writes (all-linear resolved to the layer names)."""
    import json

    from safetensors.torch import load_file

    from trainers.lora import adapter_config, adapter_state_dict

    model = apply_lora(tiny_lm(), rank=4, alpha=8)
    train_a_few_steps(model)
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "adapter_model.safetensors")
    ours = adapter_state_dict(model)
    assert set(ours) == set(saved) and all(".lora_" in k for k in ours)
    assert all(torch.equal(ours[k], saved[k]) for k in ours)
    config = adapter_config(model)
    written = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["r"] == written["r"] == 4 and config["lora_alpha"] == 8
    assert sorted(config["target_modules"]) == sorted(written["target_modules"])
    assert "model.layers.0.self_attn.q_proj" in config["target_modules"] and json.dumps(config)


def test_the_kl_reference_is_the_starting_policy_with_lora_and_without():
    """``reference_fn``: with LoRA, the trained model with its adapters off; without, a frozen
    copy taken before training. Either way the logprobs of the model as it started."""
    from trainers.models import reference_fn

    batch = make_batch()
    ids, attn = batch.input_ids_BT, batch.attention_mask_BT
    assert reference_fn(TrainConfig(bf16=False), tiny_lm()) is None  # kl_coef 0: no reference
    for rank in (0, 4):
        model = lora_model(rank) if rank else tiny_lm()
        start = copy.deepcopy(model)
        ref = reference_fn(TrainConfig(kl_coef=0.1, lora_rank=rank, bf16=False), model)
        train_a_few_steps(model)
        base = start.get_base_model() if rank else start
        with torch.no_grad():
            want = token_logprobs(base, ids, attn)[0]
            moved = token_logprobs(model, ids, attn)[0]
            got = ref(ids, attn)
        torch.testing.assert_close(got, want)
        assert not torch.allclose(moved, want)  # training moved the policy away from it
