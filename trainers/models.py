"""The models of a run, built from its config: the trained policy, the sampler, the critic, the
optimizer and the frozen reference.

By default the sampler (:class:`skyrl_agent.policies.HFPolicy`) wraps the very module being
trained, so "weight sync" is free on one machine: the next rollout sees the updated weights. The
sampler gets its own copy of the base model, updated with ``HFPolicy.update_weights`` after every
step (:meth:`Learner.sync_sampler`), with LoRA (merged adapters, ``lora_merge``: plain linear
layers decode faster), in asynchronous mode (the trainer changes weights while the sampler runs)
and with FSDP2 (sharded weights). The KL reference is a frozen copy of the starting model, or,
with LoRA, the trained model with its adapters switched off (no second copy).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_gym.errors import ConfigError
from trainers.config import ModelConfig, OptimizerConfig, TrainConfig
from trainers.critic import ValueHead
from trainers.distributed import DistContext, full_state_dict, shard_model_fsdp2
from trainers.logprobs import token_logprobs
from trainers.lora import adapter_config, adapter_state_dict, apply_lora, merged_state_dict, merged_weights
from trainers.ray_sampler import RaySampler

__all__ = ["Learner", "build_learner", "build_model", "reference_fn", "weights_for_sampler"]

#: ``ref(input_ids_BT, attention_mask_BT, prefix_len, mask_BT) -> logprobs_BT`` under the
#: frozen reference (what :func:`trainers.step.train_step` takes as ``ref_logprobs_fn``).
ReferenceFn = Callable[..., torch.Tensor]


@dataclass
class Learner:
    """The trained model and what goes with it, as :func:`build_learner` makes them."""

    cfg: TrainConfig
    """The run's config (the one the models were built from)."""
    dist: DistContext
    """This process's place in the run (one process, or a rank under ``torchrun``)."""
    model: torch.nn.Module
    """The module being trained (with LoRA adapters when ``lora_rank > 0``; sharded with FSDP2)."""
    tokenizer: Any
    """Its tokenizer."""
    rollout_model: torch.nn.Module | None
    """The sampler's own copy of the weights, or ``None`` when the sampler wraps ``model``."""
    policy: Any
    """The sampler (an ``HFPolicy``) of the training rollouts."""
    eval_policy: Any
    """The sampler of held-out evaluation: ``policy`` itself, or in asynchronous mode a second
    one on the same weights (the main thread must not share the producer's batcher)."""
    critic: ValueHead | None
    """The value head (``advantage="gae"``), trained with the policy."""
    optimizer: torch.optim.Optimizer
    """AdamW over the trained parameters (and the critic's)."""
    scheduler: Any
    """The learning-rate schedule (linear warm-up), stepped once per step that updates."""
    ref_fn: ReferenceFn | None
    """Logprobs under the frozen reference, for the KL term (``None`` when ``kl_coef`` is 0)."""

    def sync_sampler(self, version: int | None = None) -> float | None:
        """Push the trained weights to the sampler's own copy (or to the Ray workers, as
        ``version``: the trainer's steps finished); the seconds it took, or ``None`` when the
        sampler wraps the trained module (nothing to push). In asynchronous mode the update
        lands in flight, between the sampler's batches."""
        remote = isinstance(self.policy, RaySampler)
        own_copy = remote or self.rollout_model is not None or getattr(self.policy, "owns_weights", False)
        if not own_copy:  # the engine sees the optimizer's steps itself
            return None
        start = time.perf_counter()
        weights = weights_for_sampler(  # a collective under FSDP2
            self.cfg.model, self.model, self.dist, self.cfg.sampler.engine
        )
        if remote:
            if self.dist.is_main:  # rank 0 alone drives the Ray workers
                self.policy.update_weights(weights, version)
        else:
            self.policy.update_weights(weights)
        return time.perf_counter() - start

    def unchanged(self, version: int) -> None:
        """A step ended without an update: the sampler's weights are also those of ``version``
        (Ray workers record it on their next episodes; a local sampler needs nothing)."""
        if isinstance(self.policy, RaySampler) and self.dist.is_main:
            self.policy.relabel(version)

    def close(self) -> None:
        """Stop the samplers' engines."""
        self.policy.close()
        if self.eval_policy is not self.policy:
            self.eval_policy.close()


def build_model(cfg: TrainConfig, dist: DistContext) -> tuple[torch.nn.Module, Any, torch.nn.Module | None]:
    """``(model to train, tokenizer, separate sampler model or None)``, on ``dist.device``.

    The sampler gets its own plain copy of the base model when the training model cannot sample
    directly: LoRA with ``lora_merge``, asynchronous mode and FSDP2 (see the module docstring).
    Data-parallel replicas start from rank 0's weights."""
    from skyrl_agent.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(cfg.model.path)
    separate = (
        cfg.run.ray_address is None
        and cfg.sampler.engine == "hf"
        and (dist.fsdp or cfg.run.async_staleness > 0 or (cfg.model.lora_rank > 0 and cfg.model.lora_merge))
    )  # Ray workers and vLLM hold their own copies
    rollout_model = copy.deepcopy(model).eval().requires_grad_(False) if separate else None
    if cfg.model.lora_rank > 0:
        model = apply_lora(
            model,
            cfg.model.lora_rank,
            cfg.model.lora_alpha,
            cfg.model.lora_target_modules,
            cfg.model.lora_dropout,
        )
    if cfg.optimizer.activation_checkpointing:
        from trainers.checkpointing import enable_activation_checkpointing

        enable_activation_checkpointing(model)
    if cfg.optimizer.recompute_elementwise:
        from trainers.checkpointing import enable_elementwise_recompute

        enable_elementwise_recompute(model)
    if rollout_model is not None:
        rollout_model.to(dist.device)
    if dist.fsdp:
        shard_model_fsdp2(model, dist)
    else:
        model.to(dist.device)
        dist.broadcast_parameters(model)  # replicas start equal
    return model.eval(), tokenizer, rollout_model


def weights_for_sampler(
    spec: ModelConfig, model: torch.nn.Module, dist: DistContext, engine: str = "hf"
) -> dict[str, torch.Tensor]:
    """What the sampler's own copy needs after an update: every weight; with LoRA the merged
    layers (for vLLM every weight with them merged, since it takes no part of a fused group, or
    with ``lora_merge`` off the adapters alone, for vLLM's LoRA loading)."""
    if spec.lora_rank > 0:
        if engine == "vllm":
            return merged_state_dict(model) if spec.lora_merge else adapter_state_dict(model)
        return merged_weights(model)
    return full_state_dict(model, dist)


def reference_fn(cfg: TrainConfig, model: torch.nn.Module) -> ReferenceFn | None:
    """Logprobs under the frozen starting policy, for the KL term (``None`` when ``kl_coef`` is 0).

    With LoRA the base model is the reference: the trained model with its adapters switched off.
    Otherwise a frozen copy of ``model`` as it is now."""
    if cfg.algorithm.kl_coef <= 0:
        return None
    if cfg.model.lora_rank > 0:
        scored, switch = model, model.disable_adapter  # the adapters off for the call
    else:
        scored, switch = copy.deepcopy(model).eval().requires_grad_(False), contextlib.nullcontext

    def reference(
        ids: torch.Tensor, attn: torch.Tensor, prefix: int = 0, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        with switch():
            return token_logprobs(
                scored,
                ids,
                attn,
                bf16=cfg.model.bf16,
                prefix_len=prefix,
                mask_BT=mask,
                fused_head=cfg.optimizer.fused_head,
            )[0]

    return reference


def _sampler(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any, dist: DistContext) -> Any:
    """An ``HFPolicy`` over ``model``, seeded per rank, batching a whole step's episodes; with
    ``ray_address``, the Ray workers (:class:`~trainers.ray_sampler.RaySampler`) instead, which
    rank 0 alone drives when there are several trainer ranks."""
    from skyrl_agent.policies.hf import EngineConfig, HFPolicy

    rows = max(cfg.run.prompts_per_step * cfg.rollout.n_samples, cfg.sampler.max_rows)
    settings: dict[str, Any] = {
        "max_batch_size": rows,
        "seed": cfg.run.seed + 7919 * dist.rank,
        "autocast_bf16": cfg.model.bf16,
        "engine": EngineConfig(
            max_rows=rows,
            cascade_min_tokens=cfg.sampler.cascade_min_tokens,
            memory_bytes=int(cfg.sampler.memory_gb * 1e9),
            budget_name="--sampler-memory-gb",
        ),
    }
    if cfg.sampler.engine == "vllm":
        settings = vllm_settings(cfg, rows, settings["seed"])
        if cfg.model.lora_rank > 0 and not cfg.model.lora_merge:  # adapters through vLLM's LoRA
            settings["lora_config"] = adapter_config(model)
    if cfg.run.ray_address is not None:  # each worker builds its own with these settings
        return RaySampler(cfg, tokenizer, settings)
    if cfg.sampler.engine == "vllm":
        from skyrl_agent.policies.vllm_policy import VLLMPolicy

        if dist.enabled:
            raise ConfigError(
                "--sampler-engine vllm with several trainer ranks runs on Ray rollout workers: add "
                "--ray-address (and --ray-trainer-ranks N instead of torchrun)"
            )
        return VLLMPolicy(cfg.model.path, tokenizer, **settings)
    return HFPolicy(model, tokenizer, **settings)


def vllm_settings(cfg: TrainConfig, rows: int, seed: int) -> dict[str, Any]:
    """The ``VLLMPolicy`` keyword arguments of the run's sampler: its seed, the trainer's dtype
    (float32 unless bf16), room for the longest episode, a step's rows at once, its KV cache
    (``--sampler-memory-gb``; 0: 1 GB on a CPU) and ``--vllm-options``."""
    return {
        "seed": seed,
        "dtype": "bfloat16" if cfg.model.bf16 else "float32",
        "max_model_len": cfg.rollout.max_context_tokens,
        "max_batch_size": rows,
        "kv_cache_gb": cfg.sampler.memory_gb or None,
        "engine_kwargs": cfg.sampler.vllm_engine_kwargs(),
    }


def lr_factor(step: int, *, warmup: int, steps: int, schedule: str) -> float:
    """The multiple of ``lr`` that train step ``step`` (0-based) uses: a linear warm-up over
    ``warmup`` steps, then 1 (``constant``) or a decay over the steps left, ``1 - p`` (``linear``)
    or ``(1 + cos(pi p)) / 2`` (``cosine``) at the fraction ``p`` in [0, 1) of them done."""
    warmup = max(warmup, 0)
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    p = min((step - warmup) / max(steps - warmup, 1), 1.0)
    if schedule == "linear":
        return 1.0 - p
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    raise ConfigError(f"unknown lr_schedule {schedule!r}; use constant, linear or cosine")


def lr_scheduler(
    optimizer: torch.optim.Optimizer, spec: OptimizerConfig, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """``spec``'s warm-up and schedule over ``optimizer`` for a run of ``steps`` steps (stepped
    once per train step that updates)."""
    factor = functools.partial(lr_factor, warmup=spec.warmup_steps, steps=steps, schedule=spec.lr_schedule)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def build_learner(cfg: TrainConfig, dist: DistContext) -> Learner:
    """Load the model and build everything that trains it (see :class:`Learner`).

    The order is fixed (model, samplers, critic, optimizer, reference) so a seeded run draws the
    same initial values every time."""
    model, tokenizer, rollout_model = build_model(cfg, dist)
    sampled = rollout_model if rollout_model is not None else model
    policy = _sampler(cfg, sampled, tokenizer, dist)
    # asynchronous mode evaluates on a second local sampler; Ray workers serve both threads
    second = cfg.run.async_staleness > 0 and cfg.run.ray_address is None
    eval_policy = _sampler(cfg, sampled, tokenizer, dist) if second else policy
    critic: ValueHead | None = None
    if cfg.algorithm.advantage == "gae":
        critic = ValueHead(int(model.config.hidden_size)).to(dist.device)
        dist.broadcast_parameters(critic)
    params = [p for p in model.parameters() if p.requires_grad]
    if critic is not None:
        params += list(critic.parameters())
    # fused: one kernel over all tensors (on CPU about 0.13 s a step for 135M, against 0.9-1.6 s)
    optimizer = torch.optim.AdamW(
        params, lr=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay, fused=True
    )
    scheduler = lr_scheduler(optimizer, cfg.optimizer, cfg.run.steps)
    return Learner(
        cfg=cfg,
        dist=dist,
        model=model,
        tokenizer=tokenizer,
        rollout_model=rollout_model,
        policy=policy,
        eval_policy=eval_policy,
        critic=critic,
        optimizer=optimizer,
        scheduler=scheduler,
        ref_fn=reference_fn(cfg, model),
    )
