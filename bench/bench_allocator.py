"""One train-step micro-batch under glibc's malloc and under jemalloc: what is in use and what
is resident.

A fresh process per variant loads the bundled model as the trainer does (bf16 autocast), builds
one micro-batch of the main job's shape (a shared prompt of ``--prefix`` tokens and ``--rows``
answers of ``--suffix`` tokens, random ids), and runs the forward and backward ``--reps`` times,
the C heap's free pages handed back before each (``trainers.memory.release_free_memory``). A
thread samples every 10 ms the resident size and, under glibc, the bytes the heap has handed out
(``mallinfo2``: in use, whatever the heap keeps resident around them). Each rep prints the peaks
above its start, per computed token, and the seconds; the last table compares each variant's
last rep with the first variant's (glibc, plain).

    python bench/bench_allocator.py                        # glibc and jemalloc: plain, lean, checkpointed
    python bench/bench_allocator.py --rows 12 --suffix 80  # a smaller micro-batch

jemalloc is the one :func:`trainers.allocator.find_jemalloc` finds (Debian's ``libjemalloc2`` or
the ``ray`` package's), preloaded with ``trainers.allocator.MALLOC_CONF``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: ``-lean``: the layers' norms and MLP products recomputed (``recompute_elementwise``, the
#: trainer's default); ``-ckpt``: whole layers checkpointed; neither: everything kept.
VARIANTS = ("glibc", "glibc-lean", "glibc-ckpt", "jemalloc", "jemalloc-lean", "jemalloc-ckpt")


def worker(args: argparse.Namespace) -> None:
    import ctypes

    import torch

    from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer
    from trainers.allocator import jemalloc_loaded
    from trainers.checkpointing import enable_activation_checkpointing, enable_elementwise_recompute
    from trainers.logprobs import forward_logprobs, shared_prefix_len
    from trainers.memory import activation_bytes_per_token, release_free_memory, rss_bytes

    class _MallInfo2(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_size_t)
            for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        ]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    on_glibc = not jemalloc_loaded()

    def in_use() -> int:
        if not on_glibc:
            return 0
        m = libc.mallinfo2()
        return m.uordblks + m.hblkhd

    torch.set_num_threads(args.threads)
    model, _ = load_model_and_tokenizer(BUNDLED_MODEL)
    if args.worker.endswith("-ckpt"):
        enable_activation_checkpointing(model)
    if args.worker.endswith("-lean"):
        enable_elementwise_recompute(model)
    model.train()
    g = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(100, 40000, (args.prefix,), generator=g)
    ids_BT = torch.stack(
        [
            torch.cat([prompt, torch.randint(100, 40000, (args.suffix,), generator=g)])
            for _ in range(args.rows)
        ]
    )
    attn_BT = torch.ones_like(ids_BT)
    mask_BT = torch.zeros_like(ids_BT)
    mask_BT[:, args.prefix :] = 1
    prefix = shared_prefix_len(ids_BT, mask_BT)
    tokens = args.prefix + args.rows * args.suffix
    for rep in range(args.reps):
        release_free_memory()
        start_rss, start_in = rss_bytes(), in_use()
        peak = [start_rss, start_in]
        stop = threading.Event()

        def sample(peak: list[int] = peak, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_bytes())
                peak[1] = max(peak[1], in_use())
                time.sleep(0.01)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        out = forward_logprobs(
            model, ids_BT, attn_BT, mask_BT=mask_BT, with_entropy=True, bf16=True, prefix_len=prefix
        )
        loss = -(out.logprobs_BT * mask_BT).sum() / mask_BT.sum()
        loss.backward()
        seconds = time.perf_counter() - t0
        stop.set()
        thread.join()
        for p in model.parameters():
            p.grad = None
        print(
            json.dumps(
                {
                    "rep": rep,
                    "tokens": tokens,
                    "seconds": seconds,
                    "start": start_rss,
                    "peak_resident": peak[0] - start_rss,
                    "peak_in_use": peak[1] - start_in if on_glibc else None,
                    "jemalloc": not on_glibc,
                    "estimate": activation_bytes_per_token(model, bf16=True),
                }
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=626)
    ap.add_argument("--suffix", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    from trainers.allocator import MALLOC_CONF, find_jemalloc

    jemalloc = find_jemalloc()
    tokens = args.prefix + args.rows * args.suffix
    print(
        f"one micro-batch: a {args.prefix}-token prompt and {args.rows} answers of {args.suffix} tokens "
        f"({tokens} computed), forward and backward, bf16 autocast, {args.threads} threads; jemalloc: {jemalloc}"
    )
    results: dict[str, list[dict]] = {}
    for v in args.variants:
        env = dict(os.environ)
        if v.startswith("jemalloc"):
            if jemalloc is None:
                print(f"{v}: skipped (no jemalloc found)")
                continue
            env["LD_PRELOAD"] = jemalloc
            env.setdefault("MALLOC_CONF", MALLOC_CONF)
        flags = [f"--{k}={getattr(args, k)}" for k in ("rows", "prefix", "suffix", "reps", "threads", "seed")]
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", v, *flags],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
            check=False,
        )
        if out.returncode != 0:
            print(f"{v}: failed ({out.returncode})\n{out.stderr[-2000:]}")
            continue
        reps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        if v.startswith("jemalloc") and not all(r["jemalloc"] for r in reps):
            print(f"{v}: jemalloc was not loaded")
            continue
        results[v] = reps
        print(f"\n{v}: estimate {reps[0]['estimate'] / 1e6:.3f} MB per computed token")
        for r in reps:
            in_use = (
                f"in use {r['peak_in_use'] / 1e9:5.2f} GB ({r['peak_in_use'] / tokens / 1e6:.3f} MB/token)"
                if r["peak_in_use"] is not None
                else "in use   n/a"
            )
            print(
                f"  rep {r['rep']}: start {r['start'] / 1e9:5.2f} GB  peak above it: resident "
                f"{r['peak_resident'] / 1e9:5.2f} GB ({r['peak_resident'] / tokens / 1e6:.3f} MB/token), {in_use}  "
                f"{r['seconds']:5.1f} s"
            )
    if not results:
        return
    base_name = next(iter(results))
    base = results[base_name][-1]
    print(f"\nlast rep against {base_name} (same run): peak resident (start + above it), seconds")
    for v, reps in results.items():
        r = reps[-1]
        total, base_total = r["start"] + r["peak_resident"], base["start"] + base["peak_resident"]
        print(
            f"  {v:<14} {total / 1e9:5.2f} GB ({total / base_total:.2f}x)  "
            f"{r['seconds']:5.1f} s ({r['seconds'] / base['seconds']:.2f}x)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
