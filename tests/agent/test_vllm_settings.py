"""The vLLM sampler's settings and its missing-dependency error, in the main environment (the
engine itself is tested in the opt-in one: tests/agent/test_vllm_policy.py)."""

from __future__ import annotations

import importlib.util

import pytest

from skyrl_gym.errors import ConfigError, MissingDependencyError


def test_vllm_options_are_parsed_and_a_malformed_one_is_refused():
    from trainers.config import TrainConfig

    cfg = TrainConfig(
        sampler_engine="vllm",
        vllm_options=("gpu_memory_utilization=0.5", "enforce_eager=true,quantization=fp8"),
    )
    assert cfg.sampler.vllm_engine_kwargs() == {
        "gpu_memory_utilization": 0.5,
        "enforce_eager": True,
        "quantization": "fp8",
    }
    assert cfg.loss_config.truncated_is  # another engine's numerics: on by default
    with pytest.raises(ConfigError, match="'enforce_eager' is not KEY=VALUE"):
        TrainConfig(vllm_options=("enforce_eager",))
    with pytest.raises(ConfigError, match="asynchronous mode needs Ray workers"):
        TrainConfig(sampler_engine="vllm", async_staleness=1)
    with pytest.raises(ConfigError, match="sampler_engine"):
        TrainConfig(sampler_engine="sglang")


def test_the_run_s_vllm_settings_follow_the_trainer():
    from trainers.config import TrainConfig
    from trainers.models import vllm_settings

    cfg = TrainConfig(sampler_engine="vllm", bf16=False, max_context_tokens=1024, sampler_memory_gb=0.5)
    assert vllm_settings(cfg, rows=64, seed=3) == {
        "seed": 3,
        "dtype": "float32",
        "max_model_len": 1024,
        "max_batch_size": 64,
        "kv_cache_gb": 0.5,
        "engine_kwargs": {},
    }


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_the_error_says_how_to_install_it():
    from skyrl_agent.policies.vllm_policy import VLLMPolicy

    with pytest.raises(MissingDependencyError, match="vllm"):
        VLLMPolicy("any-model")
