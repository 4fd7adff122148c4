"""Tinker server, many tenants: client A's sampling latency while client B trains, vs alone.

One in-process ``TinkerServer``, the official ``tinker`` client for both tenants. Client A sends
short sampling requests one after another; client B sends ``forward_backward`` requests of many
datums in a loop on its own LoRA model. Three phases, all in this run: A alone; A while B trains
with the fair worker (lanes take turns, and B's requests let waiting jobs in between their
micro-batches: ``TinkerServerConfig.fair_worker``); A while B trains on a first-in, first-out
worker (``fair_worker=False``, the server before issue 22). Printed: A's median and 90th
percentile latency in each phase, B's requests per second, and the ratios against A alone.

    python bench/bench_tinker_tenants.py                        # tiny random model, about 2 minutes
    python bench/bench_tinker_tenants.py --model smollm2-135m --samples 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _phase(args: argparse.Namespace, fair: bool, train: bool, root: str) -> tuple[list[float], float]:
    """A's latencies (s) and B's forward_backward requests per second (0 without B)."""
    import numpy as np
    import tinker
    from tinker import types

    from integrations.tinker import TinkerServer, TinkerServerConfig

    config = TinkerServerConfig(
        checkpoint_dir=f"{root}/{'fair' if fair else 'fifo'}-{train}",
        micro_batch_size=args.micro_batch_size,
        fair_worker=fair,
        durable=False,
    )
    rng = np.random.default_rng(0)
    data = []
    for _ in range(args.datums):
        tokens = rng.integers(1, 200, args.datum_tokens + 1).tolist()
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * args.datum_tokens},
            )
        )
    with TinkerServer(config) as srv:
        a = tinker.ServiceClient(base_url=srv.url, api_key="tml-a")
        b = tinker.ServiceClient(base_url=srv.url, api_key="tml-b")
        sampler = a.create_sampling_client(base_model=args.model).result()
        params = types.SamplingParams(max_tokens=args.max_tokens, temperature=0.0, stop=[])
        prompt = types.ModelInput.from_ints([1, 2, 3, 4, 5, 6, 7, 8])
        sampler.sample(prompt, 1, params).result()  # build the sampling model outside the timing
        stop = threading.Event()
        trained = [0]

        def trainer() -> None:
            training = b.create_lora_training_client(args.model, rank=8, seed=0).result()
            while not stop.is_set():
                training.forward_backward(data, "cross_entropy").result()
                trained[0] += 1

        thread = threading.Thread(target=trainer, daemon=True)
        if train:
            thread.start()
            time.sleep(args.warmup_s)  # B's model is built and its first request runs
        t0 = time.perf_counter()
        trained[0] = 0
        latencies = []
        for _ in range(args.samples):
            start = time.perf_counter()
            sampler.sample(prompt, 1, params).result()
            latencies.append(time.perf_counter() - start)
            time.sleep(args.gap_s)
        seconds = time.perf_counter() - t0
        stop.set()
        if train:
            thread.join(timeout=600)
        for client in (a, b):
            client.close("success").result()
        return latencies, trained[0] / seconds


def _p90(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(0.9 * len(xs)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-random", help="base model of both tenants")
    p.add_argument("--samples", type=int, default=8, help="sampling requests of client A per phase")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--datums", type=int, default=48, help="datums per forward_backward of client B")
    p.add_argument("--datum-tokens", type=int, default=96)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--gap-s", type=float, default=0.2, help="pause between A's requests")
    p.add_argument("--warmup-s", type=float, default=3.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as root:
        alone, _ = _phase(args, fair=True, train=False, root=root)
        fair, fair_rate = _phase(args, fair=True, train=True, root=root)
        fifo, fifo_rate = _phase(args, fair=False, train=True, root=root)
    base = statistics.median(alone)
    print(
        f"client A: {args.samples} sampling requests of {args.max_tokens} tokens; client B: forward_backward "
        f"of {args.datums} x {args.datum_tokens} tokens, micro-batches of {args.micro_batch_size}; model {args.model}"
    )
    print(f"{'phase':<28}{'A median s':>12}{'A p90 s':>10}{'vs alone':>10}{'B req/s':>10}")
    for name, lat, rate in (
        ("A alone", alone, 0.0),
        ("A + B training, fair", fair, fair_rate),
        ("A + B training, FIFO", fifo, fifo_rate),
    ):
        med = statistics.median(lat)
        print(f"{name:<28}{med:>12.3f}{_p90(lat):>10.3f}{med / base:>9.2f}x{rate:>10.2f}")
    print(
        f"fair worker: A's median latency while B trains is {statistics.median(fifo) / statistics.median(fair):.2f}x "
        "lower than on a FIFO worker"
    )


if __name__ == "__main__":
    main()
