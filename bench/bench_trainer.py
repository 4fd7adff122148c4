"""GRPO training-step throughput: our ``trainers.step.train_step`` against TRL's ``GRPOTrainer``.

Both sides train the same model (two copies of the same initial weights) on the same fixed batch
of ``--batch`` sequences (``--prompt-len`` prompt tokens plus ``--completion-len`` completion
tokens, the completion lengths varying by up to a quarter, with a span of observation tokens
masked out of the loss in each completion), with the same advantages, the same micro-batch
(the whole batch), bf16 autocast on or off on both (``--no-bf16``), ``torch.optim.AdamW``
(lr 1e-6, no weight decay; ``fused=True`` on both by default, as TRL's default
``adamw_torch_fused`` is, or the plain loop on both with ``--optim plain``) and gradient
clipping at 1.0. Loss: PPO-clip, eps 0.2, one update per batch, token-mean reduction, no KL
(TRL: ``loss_type="dapo"``, ``beta=0``, its defaults; gradient checkpointing off on both, since
ours has none).

What is timed (generation, rewards and advantages are excluded on both sides):

* ours: one call of ``train_step(model, optimizer, batch, cfg)``: forward, logprobs, loss,
  backward, grad clip, optimizer step, zero grad (the batch is already collated).
* TRL: what ``Trainer.training_step`` plus the optimizer part of its inner loop run, minus
  ``GRPOTrainer._prepare_inputs`` (which is generation and scoring):
  ``model.train(); with compute_loss_context_manager(): loss = compute_loss(model, inputs);
  accelerator.backward(loss); _clip_grad_norm(model); optimizer.step(); model.zero_grad()``.
  ``inputs`` is the batch TRL itself prepared in a warm-up ``train()`` step driven by a
  ``rollout_func`` that returns the fixed sequences (so the tensors are TRL's own), and our
  batch is built from those same tensors.

Differences that are part of each implementation, not of the set-up: TRL computes logits only
for completion positions (``logits_to_keep``) through its chunked log-prob function; ours runs
the LM head only at positions that predict a trained token (completion tokens minus the
observation span), fused with the log-softmax in chunks, never keeping ``N x V`` logits
(``trainers.logprobs``, ``OptimizerConfig.fused_head``). Both compute the entropy for the logs
(ours without gradient, as ``entropy_coef=0``).

``--full-logits`` adds a third contestant: our ``train_step`` with ``fused_head=False`` (logits
at every position, the reference path), to show what the fused head is worth.

Steps alternate between the two sides (``--repeats`` each, after ``--warmup`` untimed each) so
that load from other processes hits both alike; the median step time is reported. Tokens per
second counts every real token of the batch (prompt and completion) once per step.

    python bench/bench_trainer.py                          # tiny random model (hidden 128, 4 layers)
    python bench/bench_trainer.py --model smollm2-135m     # the bundled SmolLM2-135M
    python bench/bench_trainer.py --profile                # where each step spends its time
    python bench/bench_trainer.py --full-logits            # also time the full-logits path
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

from skyrl_agent.types import StopReason, Trajectory  # noqa: E402
from trainers.batch import collate  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.step import train_step  # noqa: E402

LR = 1e-6
GRAD_CLIP = 1.0


def load(model_name: str) -> tuple[Any, Any]:
    from skyrl_agent.models import load_model_and_tokenizer, tiny_random_model

    if model_name == "tiny":
        return tiny_random_model(hidden_size=128, num_layers=4)
    return load_model_and_tokenizer(model_name)


def fixed_sequences(
    tok: Any, batch: int, prompt_len: int, completion_len: int, seed: int
) -> list[tuple[list[int], list[int], list[int]]]:
    """``batch`` (prompt ids, completion ids, env mask) with random ordinary tokens; each
    completion ends with EOS and has an observation span (mask 0) in its middle."""
    g = torch.Generator().manual_seed(seed)
    special = set(tok.all_special_ids)
    vocab = [i for i in range(min(len(tok), 40_000)) if i not in special]
    pick = torch.tensor(vocab)
    out = []
    for b in range(batch):
        c = completion_len - (b * completion_len // (4 * batch))  # lengths vary by up to 1/4
        prompt = pick[torch.randint(len(vocab), (prompt_len,), generator=g)].tolist()
        completion = pick[torch.randint(len(vocab), (c - 1,), generator=g)].tolist() + [tok.eos_token_id]
        mask = [1] * c
        lo, hi = c // 3, c // 3 + max(1, c // 8)  # an observation span
        mask[lo:hi] = [0] * (hi - lo)
        out.append((prompt, completion, mask))
    return out


def build_trl(
    model: Any, tok: Any, seqs: list, bf16: bool, fused: bool, out_dir: str
) -> tuple[Any, dict[str, Any]]:
    """A GRPOTrainer whose rollout_func returns ``seqs``; one warm-up ``train()`` step prepares
    the model, the optimizer and TRL's own input tensors, which are returned."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    B = len(seqs)

    def rollout(prompts: list, trainer: Any) -> dict[str, list]:
        assert len(prompts) == B
        return {
            "prompt_ids": [p for p, _, _ in seqs],
            "completion_ids": [c for _, c, _ in seqs],
            "logprobs": [[0.0] * len(c) for _, c, _ in seqs],
            "env_mask": [m for _, _, m in seqs],
            "fixed_reward": [float(i % 3) for i in range(B)],
        }

    def fixed_reward(prompts: list, completions: list, fixed_reward: list, **kw: Any) -> list[float]:
        return fixed_reward

    args = GRPOConfig(
        output_dir=out_dir,
        max_steps=1,
        per_device_train_batch_size=B,
        num_generations=B,
        gradient_accumulation_steps=1,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=GRAD_CLIP,
        optim="adamw_torch_fused" if fused else "adamw_torch",
        gradient_checkpointing=False,
        bf16=bf16,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        max_completion_length=max(len(c) for _, c, _ in seqs),
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[fixed_reward],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "fixed"}] * 4),
        rollout_func=rollout,
    )
    trainer.train()  # warm-up step: prepares model/optimizer, leaves TRL's batch in its buffer
    return trainer, trainer._buffered_inputs[0]


def trl_step(trainer: Any, inputs: dict[str, Any]) -> float:
    """TRL's training step without generation (see the module docstring); returns seconds."""
    model = trainer.model_wrapped
    t0 = time.perf_counter()
    model.train()
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(model, inputs)
    trainer.accelerator.backward(loss)
    trainer._clip_grad_norm(model)
    trainer.optimizer.step()
    model.zero_grad()
    return time.perf_counter() - t0


def our_batch(inputs: dict[str, Any], pad_id: int) -> Any:
    """Our TrainBatch from TRL's prepared tensors (same rows, same order, same advantages)."""
    trajs = []
    for b in range(inputs["prompt_ids"].shape[0]):
        prompt = inputs["prompt_ids"][b][inputs["prompt_mask"][b].bool()].tolist()
        keep = inputs["completion_mask"][b].bool()
        completion = inputs["completion_ids"][b][keep].tolist()
        mask = inputs["tool_mask"][b][keep].tolist() if "tool_mask" in inputs else [1] * len(completion)
        trajs.append(
            Trajectory(
                prompt_ids=prompt,
                response_ids=completion,
                loss_mask=[int(m) for m in mask],
                rollout_logprobs=None,
                token_rewards=[0.0] * len(completion),
                reward=0.0,
                stop_reason=StopReason.ENV_DONE,
            )
        )
    batch = collate(trajs, pad_id)
    adv_B = inputs["advantages"].float().reshape(-1)
    batch.advantages_BT = adv_B[:, None] * batch.mask_BT  # B x T
    return batch


def median_tps(times: list[float], tokens: int) -> tuple[float, float]:
    med = statistics.median(times)
    return med, tokens / med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="tiny", help="'tiny' (random, hidden 128, 4 layers) or a model path/'smollm2-135m'"
    )
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--completion-len", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per side (interleaved)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per side first")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="fp32 on both sides")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--optim",
        choices=["fused", "plain"],
        default="fused",
        help="AdamW on both sides: fused (TRL's default with torch >= 2.8) or the plain per-tensor loop",
    )
    ap.add_argument("--profile", action="store_true", help="also profile one step of each side")
    ap.add_argument(
        "--full-logits",
        action="store_true",
        help="also time our step with fused_head=False (logits at every position, the reference path)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    base, tok = load(args.model)
    n_params = sum(p.numel() for p in base.parameters())
    seqs = fixed_sequences(tok, args.batch, args.prompt_len, args.completion_len, seed=0)
    trl_model, our_model = copy.deepcopy(base), copy.deepcopy(base)
    del base

    with tempfile.TemporaryDirectory() as out_dir:
        trainer, inputs = build_trl(trl_model, tok, seqs, args.bf16, args.optim == "fused", out_dir)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        batch = our_batch(inputs, pad)
        our_model.load_state_dict(trl_model.state_dict())  # start both from the same weights
        cfg = TrainConfig(
            lr=LR,
            grad_clip=GRAD_CLIP,
            micro_batch_size=args.batch,
            bf16=args.bf16,
            loss="ppo_clip",
            reduction="token_mean",
            updates_per_step=1,
            kl_coef=0.0,
            entropy_coef=0.0,
        )
        optimizer = torch.optim.AdamW(
            our_model.parameters(), lr=LR, weight_decay=0.0, fused=args.optim == "fused"
        )
        tokens = int(batch.attention_mask_BT.sum())
        assert tokens == int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        print(
            f"model {args.model} ({n_params / 1e6:.1f}M params), batch {args.batch} x "
            f"{args.prompt_len}+<= {args.completion_len} tokens ({tokens} real, "
            f"{batch.num_tokens} trained), bf16 {args.bf16}, threads {torch.get_num_threads()}, "
            f"optim {args.optim}, TRL optimizer {type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, 'optimizer') else trainer.optimizer).__name__}, "
            f"TRL mixed precision {trainer.accelerator.mixed_precision}",
            flush=True,
        )

        autocast_seen: dict[str, set[bool]] = {"ours": set(), "trl": set()}
        for name, m in (("ours", our_model), ("trl", trl_model)):
            m.register_forward_pre_hook(
                lambda mod, a, seen=autocast_seen[name]: seen.add(torch.is_autocast_enabled("cpu"))
            )

        def ours() -> float:
            t0 = time.perf_counter()
            train_step(our_model, optimizer, batch, cfg)
            return time.perf_counter() - t0

        steps: dict[str, Any] = {"ours": ours, "TRL": lambda: trl_step(trainer, inputs)}
        if args.full_logits:
            full_model = copy.deepcopy(our_model)
            full_opt = torch.optim.AdamW(
                full_model.parameters(), lr=LR, weight_decay=0.0, fused=args.optim == "fused"
            )
            full_cfg = cfg.replace(fused_head=False)

            def full() -> float:
                t0 = time.perf_counter()
                train_step(full_model, full_opt, batch, full_cfg)
                return time.perf_counter() - t0

            steps["ours, full logits"] = full

        names = list(steps)
        for _ in range(args.warmup):
            for name in names:
                steps[name]()
        times: dict[str, list[float]] = {name: [] for name in names}
        for i in range(args.repeats):
            order = names if i % 2 == 0 else names[::-1]  # alternate who goes first
            for name in order:
                times[name].append(steps[name]())
            print(f"  round {i}: " + "  ".join(f"{n} {times[n][-1]:.3f}s" for n in names), flush=True)

        print(
            f"autocast seen in forward: ours {sorted(autocast_seen['ours'])}, TRL {sorted(autocast_seen['trl'])}"
        )
        tps = {}
        for name in names:
            med, tps[name] = median_tps(times[name], tokens)
            print(f"{name:<28} median {med:.3f}s/step  {tps[name]:,.0f} tokens/s")
        print(f"ratio ours/TRL {tps['ours'] / tps['TRL']:.2f}x (goal >= 1.5x)")
        if args.full_logits:
            print(f"ratio ours full logits/TRL {tps[names[2]] / tps['TRL']:.2f}x")

        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            for name in names:
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    steps[name]()
                print(f"--- profile of one step: {name}")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
