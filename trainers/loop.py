"""The training loop: roll out groups, compute advantages, update, log, checkpoint, evaluate.

::

    for step in steps:
        rows = sampler.next(prompts_per_step)                # resumable position
        trajectories = engine.run(rows x group_size)         # the current policy, token in/out
        drop masked episodes (infrastructure failures) and groups with equal rewards
        batch = collate(trajectories); batch.advantages = compute_advantages(...)
        train_step(model, optimizer, batch)                  # the policy shares the weights
        log metrics + trajectories; checkpoint every N steps; evaluate every M steps

By default the policy that samples (:class:`skyrl_agent.policies.HFPolicy`) wraps the very
module being trained, so "weight sync" is free on one machine: the next rollout sees the updated
weights. The sampler gets its own copy of the model, updated with ``HFPolicy.update_weights``
after every step, with LoRA (merged adapters, ``lora_merge``), in asynchronous mode (generation
of the next batches overlaps training: :mod:`trainers.async_rollouts`) and with FSDP2.
``advantage="gae"`` adds a critic (:mod:`trainers.critic`) scored before the advantages and
trained with the policy. Under ``torchrun`` every rank rolls out and trains its shard of each
step (:mod:`trainers.distributed`); rank 0 logs and checkpoints. Held-out evaluation samples ``eval_samples`` episodes per held-out prompt at the training
temperature and reports the success rate with a standard error over prompts.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.types import RolloutConfig, SamplingParams, Trajectory
from skyrl_gym.errors import ConfigError
from trainers.advantages import compute_advantages
from trainers.async_rollouts import AsyncRollouts, RolloutBatch
from trainers.batch import collate
from trainers.checkpoint import TrainState, latest_checkpoint, load_checkpoint, rng_state, save_checkpoint
from trainers.config import TrainConfig, parse_env_config
from trainers.critic import ValueHead, score_values
from trainers.data import PromptSampler, load_rows
from trainers.distributed import (
    SINGLE,
    DistContext,
    full_state_dict,
    init_distributed,
    resolve_device,
    shard_model_fsdp2,
)
from trainers.logprobs import token_logprobs
from trainers.lora import apply_lora, merged_weights
from trainers.metrics import MetricsLogger, plot_metrics, truncate_jsonl
from trainers.step import train_step

__all__ = ["EvalResult", "TrainResult", "train", "evaluate", "episode_success", "build_items"]


@dataclass
class EvalResult:
    """Held-out success of the policy at one point of training."""

    success: float
    """Mean success over episodes."""
    success_se: float
    """Standard error of ``success`` over prompts (samples of one prompt are not independent)."""
    reward_mean: float
    """Mean total reward."""
    episodes: int
    """Episodes evaluated (masked ones excluded)."""
    masked: int
    """Episodes lost to infrastructure failures."""
    seconds: float
    """Wall time of the evaluation."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TrainResult:
    """What a finished :func:`train` call reports."""

    run_dir: Path
    steps: int
    baseline: EvalResult | None
    final: EvalResult | None
    seconds: float
    plot: Path | None


def episode_success(traj: Trajectory) -> bool:
    """An episode succeeded if its env says so (``correct`` or ``solved`` metric), else if its
    reward reached 1."""
    for key in ("correct", "solved", "resolved"):
        if key in traj.env_metrics:
            return bool(traj.env_metrics[key])
    return traj.reward >= 1.0


def build_items(
    rows: Sequence[dict[str, Any]], env_id: str, env_config: dict[str, Any] | None = None
) -> list[PromptItem]:
    """Rollout items from dataset rows: the row is the env's ``extras``, its ``prompt`` the messages."""
    return [
        PromptItem(
            env_id=env_id,
            prompt=tuple(row["prompt"]),
            env_config=dict(env_config or {}),
            extras=dict(row),
            prompt_id=str(row["id"]),
        )
        for row in rows
    ]


def rollout_config(cfg: TrainConfig, n_samples: int, seed: int) -> RolloutConfig:
    """The runtime budgets and sampling of a training or evaluation rollout."""
    return RolloutConfig(
        max_turns=cfg.max_turns,
        max_tokens_per_turn=cfg.max_tokens_per_turn,
        max_context_tokens=cfg.max_context_tokens,
        observation_style=cfg.observation_style,
        sampling=SamplingParams(
            temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens_per_turn, stop=cfg.stop
        ),
        n_samples=n_samples,
        concurrency=cfg.concurrency,
        seed=seed,
        keep_messages=True,
    )


def evaluate(
    policy: Any, cfg: TrainConfig, rows: Sequence[dict[str, Any]], seed: int, dist: DistContext = SINGLE
) -> EvalResult:
    """Held-out success: ``cfg.eval_samples`` episodes per row at the training temperature.

    Data parallel: each rank plays its shard of the rows; every rank returns the whole result."""
    start = time.perf_counter()
    mine = dist.shard(len(rows))
    engine = RolloutEngine(
        policy,
        rollout_config(cfg, cfg.eval_samples, seed + 7919 * dist.rank),
        progress=cfg.progress and dist.is_main,
        progress_every_s=30.0,
    )
    own = (
        engine.run_sync(build_items(rows[mine], cfg.env, parse_env_config(cfg.env_config))).trajectories
        if rows[mine]
        else []
    )
    trajs = [t for part in dist.all_gather_objects(own) for t in part]
    good = [t for t in trajs if not t.masked]
    by_prompt: dict[str, list[float]] = defaultdict(list)
    for t in good:
        by_prompt[t.prompt_id].append(float(episode_success(t)))
    means = [sum(v) / len(v) for v in by_prompt.values()]
    success = sum(float(episode_success(t)) for t in good) / len(good) if good else 0.0
    if len(means) > 1:
        mu = sum(means) / len(means)
        se = math.sqrt(sum((m - mu) ** 2 for m in means) / (len(means) - 1) / len(means))
    else:
        se = 0.0
    return EvalResult(
        success=success,
        success_se=se,
        reward_mean=sum(t.reward for t in good) / len(good) if good else 0.0,
        episodes=len(good),
        masked=len(trajs) - len(good),
        seconds=time.perf_counter() - start,
    )


def _equal_reward_groups(trajs: Sequence[Trajectory]) -> set[int]:
    groups: dict[int, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t.reward)
    return {g for g, r in groups.items() if len(r) < 2 or max(r) - min(r) < 1e-9}


def _build_model(cfg: TrainConfig, dist: DistContext) -> tuple[torch.nn.Module, Any, torch.nn.Module | None]:
    """``(model to train, tokenizer, separate sampler model or None)``.

    The sampler gets its own plain copy of the base model when the training model cannot sample
    directly: LoRA with ``lora_merge`` (merged adapters decode faster), asynchronous mode (the
    trainer changes weights while the sampler runs) and FSDP2 (sharded weights). Otherwise the
    sampler wraps the trained module itself and weight sync is free."""
    from skyrl_agent.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(cfg.model)
    separate = dist.fsdp or cfg.async_staleness > 0 or (cfg.lora_rank > 0 and cfg.lora_merge)
    rollout_model = copy.deepcopy(model).eval().requires_grad_(False) if separate else None
    if cfg.lora_rank > 0:
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_target_modules, cfg.lora_dropout)
    if rollout_model is not None:
        rollout_model.to(dist.device)
    if dist.fsdp:
        shard_model_fsdp2(model, dist)
    else:
        model.to(dist.device)
        dist.broadcast_parameters(model)  # replicas start equal
    return model.eval(), tokenizer, rollout_model


def _weights_for_sampler(
    cfg: TrainConfig, model: torch.nn.Module, dist: DistContext
) -> dict[str, torch.Tensor]:
    """What the separate sampler model needs after an update: merged LoRA layers, or every weight."""
    if cfg.lora_rank > 0:
        return merged_weights(model)
    return full_state_dict(model, dist)


def _reference_fn(cfg: TrainConfig, model: torch.nn.Module) -> Any:
    """Logprobs under the frozen starting policy, for the KL term (None when kl_coef is 0)."""
    if cfg.kl_coef <= 0:
        return None
    if cfg.lora_rank > 0:  # the base model is the reference: switch the adapters off

        def with_adapters_off(
            ids: torch.Tensor, attn: torch.Tensor, prefix: int = 0, mask: torch.Tensor | None = None
        ) -> torch.Tensor:
            with model.disable_adapter():
                return token_logprobs(
                    model,
                    ids,
                    attn,
                    bf16=cfg.bf16,
                    prefix_len=prefix,
                    mask_BT=mask,
                    fused_head=cfg.fused_head,
                )[0]

        return with_adapters_off
    ref = copy.deepcopy(model).eval().requires_grad_(False)

    def reference(
        ids: torch.Tensor, attn: torch.Tensor, prefix: int = 0, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return token_logprobs(
            ref, ids, attn, bf16=cfg.bf16, prefix_len=prefix, mask_BT=mask, fused_head=cfg.fused_head
        )[0]

    return reference


def train(cfg: TrainConfig) -> TrainResult:
    """Run ``cfg`` to the end (or continue it with ``cfg.resume``); see the module docstring.

    Under ``torchrun`` (``WORLD_SIZE > 1``) every process calls this; see
    :mod:`trainers.distributed`."""
    owns_group = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    dist = init_distributed(cfg.dist_backend, fsdp=cfg.fsdp)
    if not dist.enabled:
        dist = dataclasses.replace(dist, single_device=resolve_device(cfg.device))
    if cfg.bf16 is None:
        from skyrl_agent.models import bf16_is_native

        cfg = dataclasses.replace(cfg, bf16=bf16_is_native(dist.device))
    try:
        return _train(cfg, dist)
    finally:
        if owns_group:
            dist.close()


def _train(cfg: TrainConfig, dist: DistContext) -> TrainResult:
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if cfg.progress and dist.is_main:
            print(msg, file=sys.stderr, flush=True)

    if dist.enabled and cfg.async_staleness > 0:
        raise ConfigError(
            "asynchronous mode (--async-staleness > 0) does not run under torchrun yet: "
            "use one process, or --async-staleness 0 with several"
        )
    if dist.fsdp:
        if cfg.advantage == "gae" or cfg.kl_coef > 0:
            raise ConfigError("FSDP2 runs support neither a critic (--advantage gae) nor --kl-coef > 0 yet")
        # the fused head reads the decoder and head weights directly; FSDP2 gathers them in forward
        cfg = dataclasses.replace(cfg, fused_head=False)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = latest_checkpoint(run_dir) if cfg.resume else None
    if not cfg.resume and (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
        raise ConfigError(
            f"{run_dir} already has checkpoints: pass --resume to continue, or use another --run-dir"
        )
    if ckpt is not None and dist.fsdp:
        raise ConfigError("--resume is not supported with FSDP2 yet (checkpoints hold full weights only)")
    dist.barrier()  # every rank has looked at run_dir before rank 0 writes to it
    if dist.is_main:
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))

    torch.manual_seed(cfg.seed)
    rows = load_rows(cfg.env, "train", cfg.train_prompts, path=cfg.data, seed=cfg.seed)
    eval_rows = (
        load_rows(cfg.env, "test", cfg.eval_prompts, path=cfg.eval_data, seed=cfg.seed)
        if cfg.eval_prompts
        else []
    )
    ranks = (
        f", {dist.world_size} ranks ({dist.backend}{', FSDP2' if dist.fsdp else ''})" if dist.enabled else ""
    )
    say(
        f"[train] {cfg.env}: {len(rows)} training prompts, {len(eval_rows)} held-out{ranks}; loading {cfg.model}"
    )
    model, tokenizer, rollout_model = _build_model(cfg, dist)
    from skyrl_agent.policies.hf import HFPolicy

    def make_policy() -> HFPolicy:
        return HFPolicy(
            rollout_model if rollout_model is not None else model,
            tokenizer,
            max_batch_size=max(cfg.prompts_per_step * cfg.group_size, 32),
            seed=cfg.seed + 7919 * dist.rank,
            autocast_bf16=cfg.bf16,
        )

    policy = make_policy()
    # asynchronous mode: evaluation in the main thread must not share the producer's batcher
    eval_policy = make_policy() if cfg.async_staleness > 0 else policy
    critic: ValueHead | None = None
    if cfg.advantage == "gae":
        critic = ValueHead(int(model.config.hidden_size)).to(dist.device)
        dist.broadcast_parameters(critic)
    params = [p for p in model.parameters() if p.requires_grad]
    if critic is not None:
        params += list(critic.parameters())
    # fused: one kernel over all tensors (on CPU about 0.13 s a step for 135M, against 0.9-1.6 s)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    warmup = max(cfg.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1)))
    ref_fn = _reference_fn(cfg, model)
    sampler = PromptSampler(rows, seed=cfg.seed)
    logger_path = run_dir / "metrics.jsonl"
    traj_path = run_dir / "trajectories.jsonl"

    start_step = 0
    baseline: EvalResult | None = None
    if ckpt is not None:
        state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler, critic=critic)
        start_step = state.step
        sampler.load_state_dict(state.sampler)
        if state.extra.get("baseline"):
            baseline = EvalResult(**state.extra["baseline"])
        if dist.is_main:
            dropped = truncate_jsonl(logger_path, start_step) + truncate_jsonl(traj_path, start_step)
            say(
                f"[train] resumed from {ckpt.name} (step {start_step}); dropped {dropped} log lines written after it"
            )
    elif cfg.resume:
        say(f"[train] --resume: no checkpoint in {run_dir}, starting from step 0")
        if dist.is_main:
            truncate_jsonl(logger_path, 0)
            truncate_jsonl(traj_path, -1)
    elif dist.is_main:
        logger_path.unlink(missing_ok=True)
        traj_path.unlink(missing_ok=True)
    if rollout_model is not None:  # the sampler starts from the (possibly resumed) trained weights
        policy.update_weights(_weights_for_sampler(cfg, model, dist))
    logger = MetricsLogger(run_dir) if dist.is_main else None
    sampler_state = sampler.state_dict()  # the position after the last consumed batch

    def checkpoint(step: int) -> None:
        if dist.enabled and not dist.parameters_in_sync(model):
            raise RuntimeError(f"data-parallel replicas diverged by step {step} (a bug: please report it)")
        model_state = full_state_dict(model, dist) if dist.fsdp else None  # a collective: every rank
        if not dist.is_main:
            dist.barrier()
            return
        extra = {"baseline": baseline.as_dict() if baseline else None}
        state = TrainState(step=step, sampler=sampler_state, rng=rng_state(), extra=extra)
        save_checkpoint(
            run_dir,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            state=state,
            keep=cfg.keep_checkpoints,
            critic=critic,
            model_state=model_state,
            optimizer_state={} if dist.fsdp else None,
        )
        dist.barrier()

    def run_eval(step: int) -> EvalResult:
        res = evaluate(eval_policy, cfg, eval_rows, seed=cfg.seed + 1_000_003, dist=dist)
        if logger is not None:
            logger.log(step, "eval", res.as_dict())
        say(
            f"[eval] step {step}: held-out success {res.success:.3f} +/- {res.success_se:.3f} "
            f"({res.episodes} episodes, reward {res.reward_mean:.3f}, {res.seconds:.0f}s)"
        )
        return res

    def produce(step: int, version: int) -> RolloutBatch:
        """One step's rollouts: this rank's shard of the prompts, then every rank's episodes."""
        t_gen = time.perf_counter()
        batch_rows = sampler.next(cfg.prompts_per_step)
        position = sampler.state_dict()
        mine = dist.shard(len(batch_rows))
        seed = cfg.seed * 100_003 + step + 1_000_003 * dist.rank
        engine = RolloutEngine(policy, rollout_config(cfg, cfg.group_size, seed=seed), progress=False)
        own = (
            engine.run_sync(
                build_items(batch_rows[mine], cfg.env, parse_env_config(cfg.env_config))
            ).trajectories
            if batch_rows[mine]
            else []
        )
        for t in own:  # group ids over the whole step, not this rank's shard
            t.group_id += mine.start
        trajs = [t for part in dist.all_gather_objects(own) for t in part]
        return RolloutBatch(step, trajs, position, version, time.perf_counter() - t_gen)

    if eval_rows and cfg.eval_before and start_step == 0:
        baseline = run_eval(0)
    final: EvalResult | None = None
    rollouts = (
        AsyncRollouts(produce, start_step + 1, cfg.steps, cfg.async_staleness).start()
        if cfg.async_staleness > 0
        else None
    )
    try:
        for step in range(start_step + 1, cfg.steps + 1):
            t_step = time.perf_counter()
            rb = rollouts.get(step) if rollouts is not None else produce(step, step - 1)
            wait_s = time.perf_counter() - t_step
            sampler_state = rb.sampler_state
            trajs = rb.trajectories
            if dist.is_main:
                with open(traj_path, "a") as fh:
                    for t in trajs:
                        fh.write(json.dumps({"step": step, **t.to_dict()}) + "\n")
            good = [t for t in trajs if not t.masked]
            flat = _equal_reward_groups(good) if cfg.skip_equal_reward_groups else set()
            trainable = [t for t in good if t.group_id not in flat]
            metrics: dict[str, Any] = {
                "reward_mean": sum(t.reward for t in good) / len(good) if good else 0.0,
                "success_rate": sum(episode_success(t) for t in good) / len(good) if good else 0.0,
                "episodes": len(trajs),
                "masked": len(trajs) - len(good),
                "flat_groups": len(flat),
                "response_tokens_mean": sum(t.num_generated_tokens for t in good) / max(len(good), 1),
                "turns_mean": sum(t.num_turns for t in good) / max(len(good), 1),
                "gen_seconds": rb.gen_seconds,
                "wait_seconds": wait_s,
                "policy_version": rb.policy_version,
                "staleness": (step - 1) - rb.policy_version,
            }
            if trainable:
                batch = collate(trainable, pad_id=policy.pad_token_id).to(dist.device)
                if critic is not None:
                    batch.old_values_BT = score_values(model, critic, batch, cfg.micro_batch_size, cfg.bf16)
                adv = compute_advantages(
                    cfg.advantage,
                    batch.mask_BT,
                    rewards_B=batch.rewards_B,
                    group_ids_B=batch.group_ids_B,
                    token_rewards_BT=batch.token_rewards_BT,
                    values_BT=batch.old_values_BT,
                    gamma=cfg.gamma,
                    lam=cfg.gae_lambda,
                )
                batch.advantages_BT = adv.advantages_BT
                batch.returns_BT = adv.returns_BT
                stats = train_step(
                    model,
                    optimizer,
                    batch,
                    cfg,
                    ref_logprobs_fn=ref_fn,
                    scheduler=scheduler,
                    dist=dist,
                    critic=critic,
                )
                metrics.update({f"{k}": v for k, v in stats.as_dict().items()})
                metrics["train_seconds"] = stats.seconds
                if rollout_model is not None:  # in flight: lands between the sampler's batches
                    t_sync = time.perf_counter()
                    policy.update_weights(_weights_for_sampler(cfg, model, dist))
                    metrics["sync_seconds"] = time.perf_counter() - t_sync
            else:  # every group flat: no signal, no update (the schedule follows optimizer updates)
                metrics["skipped_update"] = 1
            if rollouts is not None:
                rollouts.publish(step)
            metrics["step_seconds"] = time.perf_counter() - t_step
            if logger is not None:
                logger.log(step, "train", metrics)
            say(
                f"[train] step {step}/{cfg.steps}  reward {metrics['reward_mean']:.3f}  "
                f"success {metrics['success_rate']:.2f}  flat groups {len(flat)}/{cfg.prompts_per_step}  "
                f"masked {metrics['masked']}  gen {rb.gen_seconds:.1f}s  "
                f"train {metrics.get('train_seconds', 0.0):.1f}s"
                + (f"  staleness {metrics['staleness']}" if rollouts is not None else "")
            )
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint(step)
            if eval_rows and cfg.eval_every and step % cfg.eval_every == 0 and step != cfg.steps:
                run_eval(step)
    finally:
        if rollouts is not None:
            rollouts.close()
    if eval_rows:
        final = run_eval(cfg.steps)
    elapsed = time.perf_counter() - t0
    plot: Path | None = None
    if logger is not None:
        logger.close()
        plot = plot_metrics(run_dir)
        summary = {
            "env": cfg.env,
            "model": cfg.model,
            "steps": cfg.steps,
            "world_size": dist.world_size,
            "baseline": baseline.as_dict() if baseline else None,
            "final": final.as_dict() if final else None,
            "seconds": elapsed,
            "plot": str(plot),
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    policy.close()
    if eval_policy is not policy:
        eval_policy.close()
    return TrainResult(
        run_dir=run_dir, steps=cfg.steps, baseline=baseline, final=final, seconds=elapsed, plot=plot
    )
