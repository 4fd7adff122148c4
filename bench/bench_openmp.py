"""What a second thread's OpenMP workers cost the inference engine, and what releasing them gives.

The trainer computes on the main thread and the engine on its own; each thread that runs
parallel torch code keeps its own team of OpenMP workers (see ``skyrl_agent/_openmp.py``). One
run, two parts, ratios printed:

1. The bundled model's linear layers (random bf16 weights of its shapes, a decode step's rows)
   timed on a worker thread: when only that thread ever computed; after the main thread
   computed (two teams, as in ``skyrl train`` before the fix); after the main thread computed
   and released its workers (``release_openmp_workers``).
2. The main job's held-out evaluation (``--eval-prompts`` prompts x 4 samples, two turns, bf16
   where the CPU has it) through the engine, the main thread computing a forward pass first
   (as a train step does): with the release (the default) and with it switched off, alternated
   ``--repeats`` times; the median of each.

    python bench/bench_openmp.py            # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from skyrl_agent import _openmp  # noqa: E402
from skyrl_agent.policies import _engine  # noqa: E402

#: SmolLM2-135M's linear layers: q, k, v, o, gate, up (input 576), down (input 1536); 30 layers.
_SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]


def _linear_ms(rows: int, layers: int = 30, reps: int = 20) -> float:
    """Milliseconds for one pass of ``rows`` rows through the model's linear layers (bf16)."""
    weights = [[torch.randn(o, i, dtype=torch.bfloat16) for o, i in _SHAPES] for _ in range(layers)]
    head = torch.randn(49152, 576, dtype=torch.bfloat16)
    x, h = torch.randn(rows, 576, dtype=torch.bfloat16), torch.randn(rows, 1536, dtype=torch.bfloat16)

    def once() -> None:
        for w in weights:
            for m in w[:6]:
                torch.nn.functional.linear(x, m)
            torch.nn.functional.linear(h, w[6])
        torch.nn.functional.linear(x, head)

    for _ in range(3):
        once()
    start = time.perf_counter()
    for _ in range(reps):
        once()
    return (time.perf_counter() - start) / reps * 1000


def _on_thread(fn: Any, *args: Any) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)))
    t.start()
    t.join()
    return out[0]


def part1(rows: int) -> None:
    print(f"## 1. linear layers of the bundled model, {rows} rows, on a worker thread")
    print(f"  OpenMP runtime found: {_openmp.openmp_runtime() is not None}")
    alone = _on_thread(_linear_ms, rows)
    _linear_ms(rows, layers=2, reps=2)  # the main thread computes: it now holds a team
    two_teams = _on_thread(_linear_ms, rows)
    _linear_ms(rows, layers=2, reps=2)
    released = _openmp.release_openmp_workers()
    after_release = _on_thread(_linear_ms, rows)
    print(f"  only the worker ever computed      {alone:7.1f} ms")
    print(f"  main thread computed before        {two_teams:7.1f} ms")
    print(f"  ... and released its workers ({released}) {after_release:7.1f} ms")
    print(f"  two teams / released               {two_teams / after_release:.2f}x")


def part2(args: argparse.Namespace) -> None:
    from skyrl_agent.models import BUNDLED_MODEL, bf16_is_native, load_model_and_tokenizer
    from skyrl_agent.policies.hf import EngineConfig, HFPolicy
    from trainers.config import TrainConfig
    from trainers.data import load_items
    from trainers.evaluation import evaluate

    model, tok = load_model_and_tokenizer(BUNDLED_MODEL)
    bf16 = bf16_is_native("cpu")
    cfg = TrainConfig(eval_prompts=args.eval_prompts, progress=False, bf16=bf16)
    items = load_items(cfg.data.env, "test", cfg.data.eval_prompts, seed=cfg.run.seed)
    print(f"\n## 2. held-out evaluation, {len(items)} prompts x {cfg.data.eval_samples} samples, bf16 {bf16}")
    real = _engine.release_openmp_workers
    ids = torch.tensor([tok.encode("The trainer computes here first. " * 40)])
    seconds: dict[str, list[float]] = {"released": [], "not released": []}
    for _ in range(args.repeats):
        for name in ("not released", "released"):
            _engine.release_openmp_workers = real if name == "released" else (lambda: False)
            with torch.no_grad():
                model(ids)  # the main thread computes, as a train step does
            policy = HFPolicy(
                model,
                tok,
                max_batch_size=32,
                seed=cfg.run.seed,
                autocast_bf16=bf16,
                engine=EngineConfig(max_rows=32),
            )
            start = time.perf_counter()
            evaluate(policy, cfg, items, seed=cfg.run.seed)
            seconds[name].append(time.perf_counter() - start)
            policy.close()
            print(f"  {name:<13} {seconds[name][-1]:6.1f} s", flush=True)
    _engine.release_openmp_workers = real
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print(f"  median: released {med['released']:.1f} s, not released {med['not released']:.1f} s")
    print(f"  not released / released            {med['not released'] / med['released']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=24, help="rows of part 1's decode step")
    ap.add_argument("--eval-prompts", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--parts", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {os.cpu_count()} CPUs")
    if 1 in args.parts:
        part1(args.rows)
    if 2 in args.parts:
        part2(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
