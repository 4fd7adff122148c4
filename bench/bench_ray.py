"""Rollouts on Ray workers against the local sampler, and what one weight sync costs.

The main job's rollouts (calculator prompts, groups of 8, two turns, 40 tokens a turn at the
training temperature, the bundled SmolLM2-135M-Instruct) played three ways in one run:

- ``local``: the sampler in this process (``HFPolicy`` + ``RolloutEngine``, as ``skyrl train``
  without ``--ray-address``), with ``--cpus`` torch threads;
- ``ray-1``: one Ray worker holding ``--cpus`` CPUs (what ``--ray-workers 1`` costs over local:
  the worker's process, pickling the episodes back);
- ``ray-2``: two workers of ``--cpus / 2`` CPUs each (``--ray-workers 2``).

Each Ray variant plays one warm-up batch first (the workers start and load the model), then the
timed batches. Then one weight sync of the whole model as the trainer does it
(``RayRolloutEngine.update_weights`` puts the state dict in the object store; each worker loads
it before its next batch): bytes, the put's seconds and the slowest worker's load seconds.
Ratios compare figures of this run only. On a 2-core machine ``ray-2`` cannot beat ``local``:
the workers split the same two cores (the point of the workers is other machines' cores).

``--vllm`` (in the opt-in vLLM environment, ``scripts/setup-vllm-cpu.sh``) adds
``vllm-local`` (a ``VLLMPolicy`` in this process, float32 like the others) and ``vllm-ray-1``
(one Ray worker with its own vLLM engine, ``--sampler-engine vllm --ray-workers 1``), and the
sync of the whole model into that worker's engine, against the same ``local`` baseline.

    python bench/bench_ray.py                  # 16 prompts x 8 samples, 2 timed batches
    python bench/bench_ray.py --prompts 4 --batches 1 --model tiny-random   # a smoke run
    .venv-vllm/bin/python bench/bench_ray.py --vllm
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rollout_config(n_samples: int, seed: int):
    import dataclasses

    from trainers.config import default_rollout

    return dataclasses.replace(default_rollout(), n_samples=n_samples, seed=seed, keep_messages=False)


def _items(prompts: int):
    from trainers.data import load_items

    return load_items("calculator", "train", prompts, seed=0)


def _time_batches(play, items, batches: int) -> list[float]:
    out = []
    for _ in range(batches):
        start = time.perf_counter()
        trajs = play(items)
        failed = [t for t in trajs if t.masked]
        if failed:  # a rate of failed episodes would measure nothing
            raise SystemExit(f"{len(failed)} of {len(trajs)} episodes failed: {failed[0].error}")
        out.append(len(trajs) / (time.perf_counter() - start))
        print(f"[bench_ray] {len(trajs)} episodes at {out[-1]:.2f}/s", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--vllm", action="store_true", help="add the vLLM variants (needs vLLM)")
    args = ap.parse_args()

    import ray
    import torch

    from skyrl_agent.engine import RolloutEngine
    from skyrl_agent.models import load_model_and_tokenizer
    from skyrl_agent.policies.hf import EngineConfig
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine
    from trainers.ray_sampler import worker_sampler

    if args.model == "tiny-random":  # a smoke run: a small random model saved where workers read it
        import tempfile

        from skyrl_agent.models import tiny_random_model

        args.model = tempfile.mkdtemp(prefix="bench-ray-")
        model, tok = tiny_random_model(hidden_size=128, num_layers=1)  # vLLM-CPU needs heads of 32
        model.save_pretrained(args.model)
        tok.save_pretrained(args.model)
    items = _items(args.prompts)
    rows = args.prompts * args.samples
    # the trainer's sampler settings, unbudgeted, cascade attention on as by default
    settings = {
        "max_batch_size": rows,
        "seed": 0,
        "engine": EngineConfig(max_rows=rows, cascade_min_tokens=64),
    }
    config = _rollout_config(args.samples, seed=0)
    rates: dict[str, list[float]] = {}

    torch.set_num_threads(args.cpus)
    policy = worker_sampler(args.model, args.cpus, settings)
    engine = RolloutEngine(policy, config, progress=False)
    engine.run_sync(items[:2])  # warm-up
    rates["local"] = _time_batches(lambda its: engine.run_sync(its).trajectories, items, args.batches)
    policy.close()

    vllm_settings = {
        "seed": 0,
        "dtype": "float32",
        "max_model_len": 2048,
        "max_batch_size": rows,
        "kv_cache_gb": 1.0,
    }
    if args.vllm:
        policy = worker_sampler(args.model, args.cpus, vllm_settings, "vllm")
        engine = RolloutEngine(policy, config, progress=False)
        engine.run_sync(items[:2])  # warm-up
        rates["vllm-local"] = _time_batches(
            lambda its: engine.run_sync(its).trajectories, items, args.batches
        )
        policy.close()

    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    syncs: dict[str, tuple[int, float, float]] = {}
    variants = [("ray-1", 1, "hf"), ("ray-2", 2, "hf")] + ([("vllm-ray-1", 1, "vllm")] if args.vllm else [])
    for name, workers, kind in variants:
        each = args.cpus // workers
        factory = functools.partial(
            worker_sampler, args.model, each, vllm_settings if kind == "vllm" else settings, kind
        )
        with RayRolloutEngine(
            factory, config, RayConfig(num_workers=workers, num_cpus_per_worker=each)
        ) as ray_engine:
            ray_engine.run_sync(items[:2])  # the workers start and load the model
            rates[name] = _time_batches(
                lambda its: ray_engine.run_sync(its).trajectories, items, args.batches
            )
            if workers == 2 or kind == "vllm":
                model, _ = load_model_and_tokenizer(args.model)
                ray_engine.update_weights(model.state_dict(), version=1)
                ray_engine.run_sync(items[:1])  # one batch loads it
                counts = ray_engine.counts
                syncs[name] = (counts.sync_bytes, counts.put_seconds, counts.sync_seconds)
    ray.shutdown()

    print(f"rollouts: {args.prompts} calculator prompts x {args.samples} samples, model {args.model}, "
          f"{args.cpus} CPUs, {args.batches} timed batches")  # fmt: skip
    base = statistics.mean(rates["local"])
    for name, values in rates.items():
        mean = statistics.mean(values)
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {name:6s} {mean:7.2f} episodes/s ({shown})  x{mean / base:.2f} of local")
    for name, (nbytes, put_s, load_s) in syncs.items():
        print(
            f"weight sync (whole model) into {name}: {nbytes / 1e6:.1f} MB, put {put_s:.3f} s, "
            f"slowest worker's load {load_s:.3f} s"
        )


if __name__ == "__main__":
    main()
