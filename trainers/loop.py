"""The training loop: roll out groups, compute advantages, update, log, checkpoint, evaluate.

::

    run = open_run(cfg)                              # refuses to overwrite; writes config.json
    learner = build_learner(cfg)                     # model, sampler, critic, optimizer, reference
    start = restore(run, learner, sampler)           # newest checkpoint, logs cut back to it
    baseline = evaluate(learner.eval_policy, ...)    # held-out success before training
    for step in range(start + 1, cfg.run.steps + 1):
        batch = rollout_step(policy, sampler, ...)   # prompts x group_size episodes, token in/out
        good, flat, trainable = select_trainable(batch)  # drop masked episodes, equal-reward groups
        _update(learner, trainable)                  # collate, advantages, train_step, sync sampler
        log metrics + trajectories; save(run, step, ...) every N steps; evaluate every M steps
    final = evaluate(learner.eval_policy, ...)

The parts live in their own modules: :mod:`trainers.models` (the trained model, the sampler and
when it gets its own copy of the weights, the critic, the optimizer, the KL reference),
:mod:`trainers.rollouts` (a step's episodes, which of them train, their metrics),
:mod:`trainers.step` (one update), :mod:`trainers.evaluation` (held-out success with a standard
error over prompts) and :mod:`trainers.resume` (the run directory, checkpoints, resume). In
asynchronous mode the next batches are generated while the trainer trains
(:mod:`trainers.async_rollouts`). ``advantage="gae"`` adds a critic (:mod:`trainers.critic`)
scored before the advantages and trained with the policy. Under ``torchrun`` every rank rolls
out and trains its shard of each step (:mod:`trainers.distributed`); rank 0 logs and
checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from skyrl_agent.tasks import check_env_ids
from skyrl_agent.types import PromptItem, Trajectory
from skyrl_gym.errors import ConfigError
from skyrl_gym.user_envs import import_modules
from trainers.advantages import compute_advantages, episode_advantages
from trainers.allocator import jemalloc_loaded
from trainers.async_rollouts import AsyncRollouts
from trainers.batch import TrainBatch, collate
from trainers.config import TrainConfig
from trainers.critic import score_values
from trainers.data import PromptSampler, load_items, stratify_key
from trainers.distributed import DistContext, init_distributed, resolve_device
from trainers.evaluation import EvalResult, evaluate
from trainers.memory import GB, PhasePeak, release_if_above, rss_bytes, state_bytes
from trainers.metrics import MetricsLogger, plot_metrics
from trainers.models import Learner, build_learner
from trainers.ray_ranks import in_ray_rank, train_on_ray
from trainers.ray_sampler import RaySampler
from trainers.resume import RunFiles, open_run, restore, save
from trainers.rollouts import by_turn, check_staleness, rollout_metrics, rollout_step, select_trainable
from trainers.rows import count_rows, training_rows
from trainers.shaping import is_truncated, shape_overlong
from trainers.step import train_step
from trainers.trackers import open_trackers
from trainers.turn_advantages import turn_level_advantages
from trainers.types import LossReduction, parse_choice

__all__ = ["TrainResult", "train"]


@dataclass
class TrainResult:
    """What a finished :func:`train` call reports."""

    run_dir: Path
    steps: int
    baseline: EvalResult | None
    final: EvalResult | None
    seconds: float
    plot: Path | None


def train(cfg: TrainConfig) -> TrainResult:
    """Run ``cfg`` to the end (or continue it with ``cfg.run.resume``); see the module docstring.

    Under ``torchrun`` (``WORLD_SIZE > 1``) every process calls this; see
    :mod:`trainers.distributed`. With ``ray_trainer_ranks`` this process starts the ranks as Ray
    actors and returns rank 0's result (:mod:`trainers.ray_ranks`)."""
    if cfg.run.ray_trainer_ranks > 0 and not in_ray_rank():
        return train_on_ray(cfg, train)
    owns_group = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    dist = init_distributed(cfg.run.dist_backend, fsdp=cfg.run.fsdp)
    if not dist.enabled:
        dist = dataclasses.replace(dist, single_device=resolve_device(cfg.run.device))
    if cfg.model.bf16 is None:
        from skyrl_agent.models import bf16_is_native

        cfg = cfg.replace(bf16=bf16_is_native(dist.device))
    try:
        result = _train(cfg, dist)
    except BaseException:
        if owns_group:
            dist.close(sync=False)  # peers may never reach a barrier
        raise
    if owns_group:
        dist.close()
    return result


def _train(cfg: TrainConfig, dist: DistContext) -> TrainResult:
    t0 = time.perf_counter()
    say = functools.partial(_say, cfg.run.progress and dist.is_main)
    cfg = _supported_at_scale(cfg, dist)
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    import_modules(cfg.data.imports)  # on every rank: their envs are registered per process
    items = load_items(cfg.data.env, "train", cfg.data.train_prompts, path=cfg.data.path, seed=cfg.run.seed)
    eval_items = (
        load_items(cfg.data.env, "test", cfg.data.eval_prompts, path=cfg.data.eval_data, seed=cfg.run.seed)
        if cfg.data.eval_prompts
        else []
    )
    check_env_ids([*items, *eval_items])  # before the run directory is written and the model loads
    run = open_run(cfg, dist)
    torch.manual_seed(cfg.run.seed)
    ranks = (
        f", {dist.world_size} ranks ({dist.backend}{', FSDP2' if dist.fsdp else ''})" if dist.enabled else ""
    )
    # before the model loads, so that a missing field fails at once
    strata = stratify_key(cfg.data.stratify_by, cfg.data.env, cfg.data.path)
    sampler = PromptSampler(items, seed=cfg.run.seed, stratify_by=strata)
    spread = f" (spread by {strata})" if strata else ""
    say(
        f"[train] {cfg.data.env}: {len(items)} training prompts{spread}, {len(eval_items)} held-out{ranks}; "
        f"loading {cfg.model.path}"
    )
    learner = build_learner(cfg, dist)
    start_step, baseline = restore(run, learner, sampler, say)
    learner.sync_sampler(start_step)  # the sampler starts from the (possibly resumed) trained weights
    logger = (
        MetricsLogger(run.path, trackers=open_trackers(cfg.run.report_to, run.path, cfg.as_settings()))
        if dist.is_main
        else None
    )
    sampler_state = sampler.state_dict()  # the position after the last consumed batch
    evaluate_now = functools.partial(_evaluate, learner, eval_items, logger, say)
    produce = functools.partial(rollout_step, learner.policy, sampler, cfg, dist)

    if eval_items and cfg.data.eval_before and start_step == 0:
        baseline = evaluate_now(0)
    rollouts = (
        AsyncRollouts(produce, start_step + 1, cfg.run.steps, cfg.run.async_staleness).start()
        if cfg.run.async_staleness > 0
        else None
    )
    try:
        for step in range(start_step + 1, cfg.run.steps + 1):
            t_step = time.perf_counter()
            with PhasePeak() as rollout_mem:
                rb = rollouts.get(step) if rollouts is not None else produce(step, step - 1)
            wait_s = time.perf_counter() - t_step
            check_staleness(rb.trajectories, step, cfg.run.async_staleness)
            sampler_state = rb.sampler_state
            if dist.is_main:
                run.append_trajectories(step, rb.trajectories)
            shaped, shaping = shape_overlong(
                rb.trajectories,
                cfg.rollout.max_context_tokens,
                cfg.algorithm.overlong_buffer,
                cfg.algorithm.overlong_penalty,
            )
            good, flat, trainable = select_trainable(
                shaped, cfg.algorithm.skips_flat_groups, by_turn(cfg.algorithm.advantage)
            )
            metrics = rollout_metrics(
                rb, [t for t in rb.trajectories if not t.masked], flat, step=step, wait_s=wait_s
            )
            metrics.update(shaping)
            if isinstance(learner.policy, RaySampler):
                metrics.update(learner.policy.counts.as_metrics())
            no_loss = [is_truncated(t) for t in trainable] if cfg.algorithm.overlong_filter else []
            if cfg.algorithm.overlong_filter:
                metrics["overlong_filtered"] = sum(no_loss)
            with PhasePeak() as train_mem:
                if trainable and not (no_loss and all(no_loss)):
                    left_out = (
                        [t for t in good if t.group_id in flat] if cfg.algorithm.counts_flat_groups else []
                    )
                    metrics.update(_update(learner, trainable, no_loss, left_out, version=step))
                else:  # every group flat: no signal, no update (the schedule follows optimizer updates)
                    metrics["skipped_update"] = 1
                    learner.unchanged(step)
            metrics = {**_memory_metrics(learner, rollout_mem.peak, train_mem.peak), **metrics}
            if rollouts is not None:
                rollouts.publish(step)
            metrics["step_seconds"] = time.perf_counter() - t_step
            if logger is not None:
                logger.log(step, "train", metrics)
            say(_step_line(step, cfg, metrics, staleness=rollouts is not None))
            if step % cfg.run.checkpoint_every == 0 or step == cfg.run.steps:
                save(run, step, learner, sampler_state, baseline)
            if (
                eval_items
                and cfg.data.eval_every
                and step % cfg.data.eval_every == 0
                and step != cfg.run.steps
            ):
                evaluate_now(step)
    finally:
        if rollouts is not None:
            rollouts.close()
    final = evaluate_now(cfg.run.steps) if eval_items else None
    elapsed = time.perf_counter() - t0
    plot: Path | None = None
    if logger is not None:
        plot = plot_metrics(run.path)
        logger.log_file(plot)
        logger.close()
        _write_summary(run, cfg, dist, baseline, final, elapsed, plot)
    learner.close()
    return TrainResult(
        run_dir=run.path, steps=cfg.run.steps, baseline=baseline, final=final, seconds=elapsed, plot=plot
    )


def _memory_metrics(learner: Learner, rollout_peak: int, train_peak: int) -> dict[str, float]:
    """Where the step's memory was (GB): the resident peak while it waited for its rollouts (in
    asynchronous mode the producer's, overlapping the previous update, are partly outside it)
    and during its update, the resident size once
    the update's freed memory may be handed back (``OptimizerConfig.release_memory_above``), the
    trained weights and their optimizer state, and the sampler's prefix store (the update's own
    figure, taken before it emptied the store, takes precedence: see :func:`_update`)."""
    released = release_if_above(learner.cfg.optimizer.release_memory_above)
    parts = state_bytes(learner.model, learner.optimizer)
    out = {
        "mem_rollout_peak_gb": rollout_peak / GB,
        "mem_train_peak_gb": train_peak / GB,
        "mem_rss_gb": rss_bytes() / GB,
        "mem_weights_gb": parts["weights"] / GB,
        "mem_optimizer_gb": parts["optimizer"] / GB,
        "mem_released": float(released),
    }
    stats = learner.policy.engine_stats() if hasattr(learner.policy, "engine_stats") else None
    if stats is not None:
        out["mem_prefix_store_gb"] = stats.prefix_store_bytes / GB
    return out


def _say(on: bool, msg: str) -> None:
    """A progress line on stderr (rank 0, with ``cfg.run.progress``)."""
    if on:
        print(msg, file=sys.stderr, flush=True)


def _supported_at_scale(cfg: TrainConfig, dist: DistContext) -> TrainConfig:
    """``cfg`` as this launch can run it: refuses (:class:`ConfigError`) what data parallelism
    and FSDP2 do not support yet; FSDP2 turns the fused head off (it reads the decoder and head
    weights directly, which FSDP2 gathers only inside forward)."""
    if dist.enabled and cfg.run.ray_address is not None and not in_ray_rank():
        raise ConfigError(
            "--ray-address does not run under torchrun: launch it without torchrun, with "
            "--ray-trainer-ranks N for N trainer ranks on the cluster"
        )
    if dist.enabled and cfg.run.async_staleness > 0:
        raise ConfigError(
            "asynchronous mode (--async-staleness > 0) does not run under torchrun yet: "
            "use one process, or --async-staleness 0 with several"
        )
    if dist.fsdp:
        if cfg.algorithm.advantage == "gae" or cfg.algorithm.kl_coef > 0:
            raise ConfigError("FSDP2 runs support neither a critic (--advantage gae) nor --kl-coef > 0 yet")
        cfg = cfg.replace(fused_head=False)
    return cfg


def kept_share(
    reduction: str, batch: TrainBatch, left_out: list[Trajectory], step_wise: bool = False
) -> float:
    """``batch``'s share of what the loss's mean counts (tokens for ``token_mean``, groups for
    ``prompt_mean``, sequences otherwise) when the ``left_out`` episodes count too: the factor
    that makes the mean over ``batch`` the mean over both, the left-out rows contributing zero
    (``group_filter="skip_counted"``)."""
    if not left_out:
        return 1.0
    mode = parse_choice(LossReduction, reduction)
    if mode is LossReduction.TOKEN_MEAN:
        kept, left = batch.num_tokens, sum(sum(1 for m in t.loss_mask if m) for t in left_out)
    elif mode is LossReduction.PROMPT_MEAN:
        kept, left = len(set(batch.group_ids_B.tolist())), len({t.group_id for t in left_out})
    else:  # one sequence per episode, or per turn / stretch of rewritten history
        kept = batch.input_ids_BT.shape[0]
        left = count_rows(left_out, step_wise)
    return kept / (kept + left) if kept + left else 1.0


def _update(
    learner: Learner,
    trainable: list[Trajectory],
    no_loss: list[bool] | None = None,
    left_out: list[Trajectory] | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    """collate -> (critic values) -> advantages -> :func:`train_step` -> weights to the sampler
    (as ``version``, the steps finished after it); the step's training metrics. Rows flagged in
    ``no_loss`` (overlong filtering) keep their reward in their group's baseline but train no
    token; ``left_out`` (equal-reward groups that still count in the loss's mean) scale the loss
    by :func:`kept_share`."""
    cfg, dist = learner.cfg, learner.dist
    # one row per episode, or several (each turn, or each stretch of a rewritten history)
    rows = training_rows(trainable, cfg.algorithm.step_wise)
    per_step = not rows.whole
    batch = collate(rows.rows, pad_id=learner.policy.pad_token_id).to(dist.device)
    turn_stats: dict[str, float] = {}
    if no_loss and any(no_loss):
        silenced = [no_loss[e] for e in rows.episode]
        batch.mask_BT[torch.tensor(silenced, device=batch.mask_BT.device)] = 0.0
    if per_step:  # every row gets its episode's advantage; each episode counts once
        adv_E = episode_advantages(
            cfg.algorithm.advantage,
            torch.tensor([t.reward for t in trainable]),
            torch.tensor([t.group_id for t in trainable]),
        ).to(batch.mask_BT.device)
        batch.advantages_BT = rows.broadcast(adv_E, batch.mask_BT)
    elif by_turn(cfg.algorithm.advantage):  # each turn its own advantage (trainers.turn_advantages)
        batch.advantages_BT = turn_level_advantages(
            cfg.algorithm.advantage,
            trainable,
            batch.mask_BT,
            gamma=cfg.algorithm.gamma,
            coef=cfg.algorithm.turn_advantage_coef,
            anchor=cfg.algorithm.gigpo_anchor,
            stats=turn_stats,
        )
    else:
        if learner.critic is not None:
            batch.old_values_BT = score_values(
                learner.model, learner.critic, batch, cfg.optimizer.micro_batch_size, cfg.model.bf16
            )
        adv = compute_advantages(
            cfg.algorithm.advantage,
            batch.mask_BT,
            rewards_B=batch.rewards_B,
            group_ids_B=batch.group_ids_B,
            token_rewards_BT=batch.token_rewards_BT,
            values_BT=batch.old_values_BT,
            gamma=cfg.algorithm.gamma,
            lam=cfg.algorithm.gae_lambda,
        )
        batch.advantages_BT = adv.advantages_BT
        batch.returns_BT = adv.returns_BT
    batch.loss_weight = kept_share(cfg.algorithm.reduction, batch, left_out or [], cfg.algorithm.step_wise)
    store_bytes = None
    if cfg.run.async_staleness == 0 and hasattr(learner.policy, "drop_stale_kv"):
        store_bytes = learner.policy.drop_stale_kv()  # stale after this update: not held through its peak
    # The rollouts' freed memory (KV, buffers) sits in the sampler thread's heap arena, out of the
    # training thread's reach: without this the step's activations come on top of it.
    release_if_above(cfg.optimizer.release_memory_above)
    stats = train_step(
        learner.model,
        learner.optimizer,
        batch,
        cfg,
        ref_logprobs_fn=learner.ref_fn,
        scheduler=learner.scheduler,
        dist=dist,
        critic=learner.critic,
    )
    metrics: dict[str, Any] = {**stats.as_dict(), **turn_stats, "train_seconds": stats.seconds}
    if store_bytes is not None:  # what the rollouts left in the prefix store
        metrics["mem_prefix_store_gb"] = store_bytes / GB
    if left_out:
        metrics["loss_weight"] = batch.loss_weight
    if per_step:
        metrics["samples_per_episode"] = len(rows.rows) / len(trainable)
    sync_s = learner.sync_sampler(version)  # in flight: lands between the sampler's batches
    if sync_s is not None:
        metrics["sync_seconds"] = sync_s
    return metrics


def _evaluate(
    learner: Learner,
    items: list[PromptItem],
    logger: MetricsLogger | None,
    say: Callable[[str], None],
    step: int,
) -> EvalResult:
    """Held-out evaluation at ``step``, logged and printed."""
    cfg = learner.cfg
    res = evaluate(learner.eval_policy, cfg, items, seed=cfg.run.seed + 1_000_003, dist=learner.dist)
    release_if_above(cfg.optimizer.release_memory_above)  # the episodes' buffers, before the next phase
    if logger is not None:
        logger.log(step, "eval", res.log_record())
    say(
        f"[eval] step {step}: held-out success {res.success:.3f} +/- {res.success_se:.3f} "
        f"({res.episodes} episodes, reward {res.reward_mean:.3f}, {res.turns_mean:.1f} turns, {res.seconds:.0f}s)"
    )
    return res


def _step_line(step: int, cfg: TrainConfig, m: dict[str, Any], *, staleness: bool) -> str:
    """The progress line of a training step."""
    return (
        f"[train] step {step}/{cfg.run.steps}  reward {m['reward_mean']:.3f}  "
        f"success {m['success_rate']:.2f}  flat groups {m['flat_groups']}/{m['prompts_drawn']}  "
        + (f"rounds {m['sampling_rounds']}  " if cfg.algorithm.group_filter == "dynamic" else "")
        + f"masked {m['masked']}  gen {m['gen_seconds']:.1f}s  "
        f"train {m.get('train_seconds', 0.0):.1f}s"
        + (f"  staleness {m['staleness']}" if staleness else "")
        + (
            f"  peak {max(m['mem_rollout_peak_gb'], m['mem_train_peak_gb']):.1f} GB"
            if "mem_rss_gb" in m
            else ""
        )
    )


def _write_summary(
    run: RunFiles,
    cfg: TrainConfig,
    dist: DistContext,
    baseline: EvalResult | None,
    final: EvalResult | None,
    seconds: float,
    plot: Path | None,
) -> None:
    """``summary.json``: what the run was and what it reached."""
    summary = {
        "env": cfg.data.env,
        "model": cfg.model.path,
        "steps": cfg.run.steps,
        "world_size": dist.world_size,
        "allocator": "jemalloc" if jemalloc_loaded() else "glibc",
        "baseline": baseline.as_dict() if baseline else None,
        "final": final.as_dict() if final else None,
        "seconds": seconds,
        "plot": str(plot),
    }
    (run.path / "summary.json").write_text(json.dumps(summary, indent=2))
