"""Where a train step's memory goes, and what activation checkpointing and smaller micro-batches save.

``--trainer``: each variant runs in a fresh process (so one variant's freed memory does not hide
the next one's), builds the bundled model and AdamW, and runs ``--steps`` train steps (fused
AdamW, bf16 autocast unless ``--no-bf16``, ``TrainConfig``'s defaults otherwise) on one batch shaped like a multi-turn
tool task: ``--groups`` prompts of ``--prefix`` tokens, ``--group-size`` episodes each of about
``--tokens`` tokens, each with ``--observations`` untrained observations of ``--obs-tokens``
tokens (random token ids, random advantages). It prints, per step: resident memory before the
step, the step's resident peak (sampled every 20 ms, :class:`trainers.memory.PhasePeak`), after
it (and after the C heap's free pages are handed back), and the seconds; then the last step's peak above the
resident size after the first step's release per computed token of the largest
micro-batch, and each variant's peak and time against the first variant's (the ratio base,
measured in the same run).

    python bench/bench_memory.py --trainer [--variants mbt8192 ckpt-mbt8192 ...] [--rows 16]

Variants are ``[ckpt-|lean-]mbt<N>``: ``micro_batch_tokens=N``, with ``activation_checkpointing``
when prefixed ``ckpt-``, with ``recompute_elementwise`` (the trainer's default: each layer's norms
and MLP product recomputed) when prefixed ``lean-``, with everything kept otherwise.

``--engine``: the sampler's memory. For each shape ``rows x context`` (``--rows``, ``--contexts``;
shapes over ``--max-tokens`` tokens in flight are skipped) a fresh process loads the bundled model
as the trainer does (bf16 autocast, the bf16 weight copy, the engine's defaults with
``max_rows=rows``), warms up on one short request, then submits ``rows`` requests at once, each
a distinct random prompt of ``context - --gen`` tokens generating ``--gen`` tokens. It prints the
resident peak above the warmed-up size, that peak per token in flight, the KV the rows hold in
theory (layers x 2 x kv heads x head size x bytes, per token), the engine's KV buffers and the
prefix store after the run, and the seconds.

    python bench/bench_memory.py --engine [--rows 1 8 32 64] [--contexts 512 1024 2048 4096 8192]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_VARIANTS = ["mbt8192", "lean-mbt8192", "mbt2048", "ckpt-mbt8192", "ckpt-mbt32768"]


def _variant(name: str) -> tuple[int, str]:
    """``(micro_batch_tokens, "ckpt" | "lean" | "plain")`` of a variant's name."""
    mode, _, rest = name.partition("-") if name.startswith(("ckpt-", "lean-")) else ("plain", "", name)
    if not rest.startswith("mbt") or not rest[3:].isdigit():
        raise SystemExit(f"unknown variant {name!r}: use [ckpt-|lean-]mbt<N>, e.g. mbt8192 or ckpt-mbt8192")
    return int(rest[3:]), mode


def _batch(tok_pad: int, args: argparse.Namespace):  # noqa: ANN202
    import torch

    from skyrl_agent.types import StopReason, Trajectory
    from trainers.batch import collate

    g = torch.Generator().manual_seed(args.seed)
    trajectories = []
    for p in range(args.groups):
        prompt = torch.randint(100, 40000, (args.prefix,), generator=g).tolist()
        for i in range(args.group_size):
            n = (
                args.tokens
                - args.prefix
                + int(torch.randint(-args.tokens // 10, args.tokens // 10 + 1, (1,), generator=g))
            )
            response = torch.randint(100, 40000, (n,), generator=g).tolist()
            mask = [1] * n
            for k in range(1, args.observations + 1):  # observations between the turns
                s = k * n // (args.observations + 1)
                mask[s : s + args.obs_tokens] = [0] * args.obs_tokens
            trajectories.append(
                Trajectory(
                    prompt_ids=prompt,
                    response_ids=response,
                    loss_mask=mask,
                    rollout_logprobs=None,
                    token_rewards=[0.0] * n,
                    reward=float(torch.randint(0, 2, (1,), generator=g)),
                    stop_reason=StopReason.ENV_DONE,
                    group_id=p,
                    sample_index=i,
                )
            )
    batch = collate(trajectories, pad_id=tok_pad)
    batch.advantages_BT = torch.randn(batch.input_ids_BT.shape[0], generator=g)[:, None] * batch.mask_BT
    return batch


def worker(args: argparse.Namespace) -> None:
    """One variant in this process: JSON lines on stdout."""
    import torch

    from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer
    from trainers.checkpointing import enable_activation_checkpointing, enable_elementwise_recompute
    from trainers.config import TrainConfig
    from trainers.logprobs import shared_prefix_len
    from trainers.memory import (
        PhasePeak,
        activation_bytes_per_token,
        release_free_memory,
        rss_bytes,
        state_bytes,
    )
    from trainers.step import micro_batches, train_step

    torch.set_num_threads(args.threads)
    mbt, mode = _variant(args.worker)
    model, tok = load_model_and_tokenizer(BUNDLED_MODEL)
    if mode == "ckpt":
        enable_activation_checkpointing(model)
    elif mode == "lean":
        enable_elementwise_recompute(model)
    # the variant's token bound alone (no activation budget on top of it)
    cfg = TrainConfig(
        bf16=args.bf16,
        micro_batch_tokens=mbt,
        activation_checkpointing=mode == "ckpt",
        recompute_elementwise=mode == "lean",
        train_memory_gb=0,
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6, fused=True)
    batch = _batch(tok.pad_token_id, args)
    slices = micro_batches(batch, cfg.optimizer.micro_batch_size, cfg.optimizer.micro_batch_tokens)
    computed = []
    for sl in slices:
        sub = batch.select(sl)
        prefix = shared_prefix_len(sub.input_ids_BT, sub.mask_BT)
        lengths = sub.attention_mask_BT.sum(dim=1).tolist()
        computed.append(prefix + sum(max(int(L) - prefix, 0) for L in lengths))
    print(
        json.dumps(
            {
                "kind": "batch",
                "rows": batch.input_ids_BT.shape[0],
                "attended": int(batch.attention_mask_BT.sum()),
                "trained": int(batch.mask_BT.sum()),
                "micro_batches": len(slices),
                "largest_micro_batch_tokens": max(computed),
                "loaded": rss_bytes(),
                "estimate": activation_bytes_per_token(model, bf16=args.bf16),
            }
        ),
        flush=True,
    )
    for step in range(args.steps):
        with PhasePeak() as phase:
            stats = train_step(model, optimizer, batch, cfg)
        parts = state_bytes(model, optimizer)
        release_free_memory()
        trimmed = rss_bytes()
        print(
            json.dumps(
                {
                    "kind": "step",
                    "step": step,
                    "before": phase.start,
                    "peak": phase.peak,
                    "after": phase.end,
                    "after_release": trimmed,
                    "seconds": stats.seconds,
                    **parts,
                }
            ),
            flush=True,
        )


def engine_worker(args: argparse.Namespace) -> None:
    """One engine shape in this process: one JSON line on stdout."""
    import torch

    from skyrl_agent.models import BUNDLED_MODEL
    from skyrl_agent.policies.hf import EngineConfig, HFPolicy
    from skyrl_agent.types import GenerateRequest, SamplingParams
    from trainers.memory import PhasePeak, release_free_memory

    torch.set_num_threads(args.threads)
    rows, context = (int(x) for x in args.engine_worker.split("x"))
    extra = json.loads(args.engine_config or "{}")
    policy = HFPolicy.from_pretrained(
        BUNDLED_MODEL,
        max_batch_size=rows,
        seed=args.seed,
        autocast_bf16=True,
        engine=EngineConfig(max_rows=rows, **extra),
    )
    engine = policy.engine
    g = torch.Generator().manual_seed(args.seed)
    params = SamplingParams(max_tokens=args.gen, temperature=1.0, ignore_eos=True, logprobs=True)
    policy.generate_sync([GenerateRequest(prompt_ids=[1, 2, 3, 4], sampling=params)])
    engine.clear_prefix_store()
    release_free_memory()
    requests = [
        GenerateRequest(
            prompt_ids=torch.randint(100, 40000, (context - args.gen,), generator=g).tolist(), sampling=params
        )
        for _ in range(rows)
    ]
    per_token = engine._slots.bytes_per_token  # keys and values in the engine's KV dtype (bf16 here)
    start = time.perf_counter()
    with PhasePeak(interval_s=0.005) as phase:
        outs = policy.generate_sync(requests)
    seconds = time.perf_counter() - start
    assert all(len(o.token_ids) == args.gen for o in outs)
    stats = engine.stats()
    buffers = engine._slots.nbytes()
    print(
        json.dumps(
            {
                "rows": rows,
                "context": context,
                "in_flight": rows * context,
                "kv_per_token": per_token,
                "before": phase.start,
                "peak": phase.peak,
                "after": phase.end,
                "buffers": buffers,
                "store": stats.prefix_store_bytes,
                "prefills": stats.prefills,
                "seconds": seconds,
            }
        ),
        flush=True,
    )
    policy.close()


def run_engine(args: argparse.Namespace) -> None:
    shapes = [(r, c) for r in args.rows for c in args.contexts]
    print(
        f"engine: rows {args.rows} x contexts {args.contexts} (prompt = context - {args.gen}, {args.gen} "
        f"generated), at most {args.max_tokens} tokens in flight, {args.threads} threads, bf16 autocast"
        + (f", engine settings {args.engine_config}" if args.engine_config else "")
    )
    print(
        f"{'rows':>5} {'context':>8} {'in flight':>10} {'peak above':>11} {'per token':>10} "
        f"{'KV theory':>10} {'buffers':>9} {'store':>9} {'prefills':>9} {'seconds':>8}"
    )
    results = []
    for rows, context in shapes:
        if rows * context > args.max_tokens:
            print(f"{rows:>5} {context:>8} {rows * context:>10}  skipped (over --max-tokens)")
            continue
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--engine-worker",
            f"{rows}x{context}",
            f"--gen={args.gen}",
            f"--threads={args.threads}",
            f"--seed={args.seed}",
        ]
        if args.engine_config:
            cmd.append(f"--engine-config={args.engine_config}")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"{rows:>5} {context:>8}  failed ({out.returncode})\n{out.stderr[-2000:]}")
            continue
        r = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
        results.append(r)
        above = r["peak"] - r["before"]
        print(
            f"{rows:>5} {context:>8} {r['in_flight']:>10} {above / 1e9:>8.2f} GB {above / r['in_flight'] / 1e3:>7.1f} KB "
            f"{r['kv_per_token'] / 1e3:>7.1f} KB {r['buffers'] / 1e9:>6.2f} GB {r['store'] / 1e9:>6.2f} GB "
            f"{r['prefills']:>9} {r['seconds']:>8.1f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


def run_trainer(args: argparse.Namespace) -> None:
    variants = args.variants or DEFAULT_VARIANTS
    for v in variants:
        _variant(v)
    print(
        f"batch: {args.groups} prompts x {args.group_size} episodes, about {args.tokens} tokens each over a "
        f"{args.prefix}-token prompt, {args.observations} observations of {args.obs_tokens} tokens; "
        f"{args.steps} steps, {args.threads} threads, {'bf16 autocast' if args.bf16 else 'float32 (--no-bf16)'}"
    )
    results: dict[str, dict] = {}
    for v in variants:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", v, *_shape_flags(args)]
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"  {v}: failed ({out.returncode})\n{out.stderr[-2000:]}")
            continue
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        info = next(x for x in lines if x["kind"] == "batch")
        steps = [x for x in lines if x["kind"] == "step"]
        results[v] = {"batch": info, "steps": steps, "wall": time.perf_counter() - start}
        print(
            f"\n{v}: {info['rows']} rows, {info['attended']} attended and {info['trained']} trained tokens, "
            f"{info['micro_batches']} micro-batches (largest {info['largest_micro_batch_tokens']} computed tokens); "
            f"{info['loaded'] / 1e9:.2f} GB resident after loading"
        )
        for s in steps:
            print(
                f"  step {s['step']}: before {s['before'] / 1e9:5.2f} GB  peak {s['peak'] / 1e9:5.2f} GB  "
                f"after {s['after'] / 1e9:5.2f} GB, {s['after_release'] / 1e9:5.2f} GB released  {s['seconds']:6.1f} s  (weights {s['weights'] / 1e9:.2f}, "
                f"grads {s['grads'] / 1e9:.2f}, optimizer {s['optimizer'] / 1e9:.2f} GB)"
            )
        last = steps[-1]
        per_token = (last["peak"] - steps[0]["after_release"]) / max(info["largest_micro_batch_tokens"], 1)
        print(
            f"  last step's peak above the resident size after the first step's release: "
            f"{per_token / 1e6:.3f} MB per computed token of the largest micro-batch "
            f"(estimated by trainers.memory.activation_bytes_per_token: {info.get('estimate', 0) / 1e6:.3f} MB)"
        )
    if not results:
        return
    base_name = next(iter(results))
    base = results[base_name]["steps"][-1]
    print(f"\nlast step against {base_name} (same run):")
    for v, r in results.items():
        s = r["steps"][-1]
        print(
            f"  {v:<16} peak {s['peak'] / 1e9:5.2f} GB ({s['peak'] / base['peak']:.2f}x)  "
            f"step {s['seconds']:6.1f} s ({s['seconds'] / base['seconds']:.2f}x)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


def _shape_flags(args: argparse.Namespace) -> list[str]:
    return [
        f"--{k.replace('_', '-')}={getattr(args, k)}"
        for k in (
            "groups",
            "group_size",
            "tokens",
            "prefix",
            "observations",
            "obs_tokens",
            "steps",
            "threads",
            "seed",
        )
    ] + ([] if args.bf16 else ["--no-bf16"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", action="store_true", help="the train step's memory")
    ap.add_argument("--engine", action="store_true", help="the sampler's memory by rows and context")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64], help="--engine: rows at once")
    ap.add_argument("--contexts", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--gen", type=int, default=16, help="--engine: tokens generated per row")
    ap.add_argument("--max-tokens", type=int, default=65536, help="--engine: skip shapes with more in flight")
    ap.add_argument("--engine-config", default=None, help="--engine: EngineConfig fields as JSON")
    ap.add_argument("--engine-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--variants", nargs="+", default=None, help=f"default: {' '.join(DEFAULT_VARIANTS)}")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--prefix", type=int, default=350)
    ap.add_argument("--observations", type=int, default=5)
    ap.add_argument("--obs-tokens", type=int, default=60)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--trainer: bf16 autocast (--no-bf16: float32, as the trainer runs where the CPU has no native bf16)",
    )
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
    elif args.engine_worker:
        engine_worker(args)
    elif args.trainer:
        run_trainer(args)
    elif args.engine:
        run_engine(args)
    else:
        ap.error("choose a section: --trainer or --engine")


if __name__ == "__main__":
    main()
