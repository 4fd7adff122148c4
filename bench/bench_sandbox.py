"""Sandbox overheads, each a ratio against a baseline measured in the same run.

    python bench/bench_sandbox.py [--n 40] [--no-docker]

1. Docker command round trip: ``DockerSandbox.exec`` vs a raw docker SDK ``exec_run`` on the
   same container (goal: at most 10% overhead).
2. A ready sandbox from the warm pool vs creating and starting a container cold (goal: at least
   5x faster), both as the bare hand-over and including the first command.
3. Local backend command round trip vs bare ``subprocess.run``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skyrl_gym.sandbox import (  # noqa: E402
    DockerSandbox,
    DockerSandboxConfig,
    LocalSandbox,
    LocalSandboxConfig,
    SandboxLimits,
    SandboxPool,
)


def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def interleaved(a, b, n):
    """Run a and b alternately n times each (so drift hits both); returns their times."""
    ta, tb = [], []
    for _ in range(n):
        ta += timed(a, 1)
        tb += timed(b, 1)
    return ta, tb


def ms(xs):
    return f"median {statistics.median(xs) * 1e3:7.2f} ms  mean {statistics.fmean(xs) * 1e3:7.2f} ms"


def row(name, ours, base, goal):
    r = statistics.median(ours) / statistics.median(base)
    print(f"  ours: {ms(ours)}")
    print(f"  base: {ms(base)}")
    print(f"  ratio {name}: {r:.3f}  ({goal})")
    return r


def bench_docker(n):
    from skyrl_gym.sandbox.images import build_images

    image = next(b.tag for b in build_images(["python"], log=lambda s: None))
    cfg = DockerSandboxConfig(image=image, limits=SandboxLimits(timeout_s=30))
    print(f"\n[1] Docker command round trip ('true'), {n} interleaved runs, image {image}")
    with DockerSandbox(cfg) as sb:
        c = sb.container
        for _ in range(3):  # warm up both paths
            sb.exec(["true"])
            c.exec_run(["true"])
        ours, raw = interleaved(lambda: sb.exec(["true"]), lambda: c.exec_run(["true"]), n)
        r1 = row(
            "ours / raw exec_run",
            ours,
            raw,
            f"overhead {100 * (statistics.median(ours) / statistics.median(raw) - 1):+.1f}%, goal <= +10%",
        )

    print(f"\n[2] Ready sandbox: warm pool vs cold create+start, {max(5, n // 4)} runs")
    k = max(5, n // 4)
    cold, cold_first = [], []
    for _ in range(k):
        t = time.perf_counter()
        sb = DockerSandbox(cfg)
        cold.append(time.perf_counter() - t)
        sb.exec(["true"])
        cold_first.append(time.perf_counter() - t)
        sb.close()
    warm, warm_first = [], []
    with SandboxPool(cfg, size=2) as pool:
        for _ in range(k):
            pool.wait_warm(timeout=120)
            t = time.perf_counter()
            sb = pool.acquire()
            warm.append(time.perf_counter() - t)
            sb.exec(["true"])
            warm_first.append(time.perf_counter() - t)
            pool.release(sb)
    print("  hand-over only:")
    r2 = statistics.median(cold) / statistics.median(warm)
    print(
        f"    cold: {ms(cold)}\n    warm: {ms(warm)}\n  ratio cold / warm (hand-over): {r2:.0f}x  (goal >= 5x)"
    )
    r3 = statistics.median(cold_first) / statistics.median(warm_first)
    print("  including the first command:")
    print(
        f"    cold: {ms(cold_first)}\n    warm: {ms(warm_first)}\n  ratio cold / warm (first command done): {r3:.1f}x  (goal >= 5x)"
    )
    return r1, r2, r3


def bench_local(n):
    results = {}
    for iso in ("bwrap", "none"):
        try:
            sb = LocalSandbox(LocalSandboxConfig(isolation=iso))
        except Exception as exc:  # bubblewrap missing
            print(f"\n[3] local ({iso}): skipped: {exc}")
            continue
        print(f"\n[3] Local command round trip ('true'), isolation={iso}, {n} interleaved runs")
        with sb:
            for _ in range(3):
                sb.exec(["true"])
            ours, bare = interleaved(
                lambda sb=sb: sb.exec(["true"]), lambda: subprocess.run(["true"], capture_output=True), n
            )
            results[iso] = row(
                "LocalSandbox / subprocess.run",
                ours,
                bare,
                "price of rlimits, own uid, namespaces, tree kill",
            )
            # the same isolated command line launched bare: what our Python layer itself adds
            argv = sb._argv(["true"], sb.workdir, sb.limits.timeout_s)
            kw = {"user": sb.uid, "group": sb.uid, "extra_groups": []} if sb.uid is not None else {}
            cwd = "/" if sb.use_bwrap else sb.workdir
            ours2, same = interleaved(
                lambda sb=sb: sb.exec(["true"]),
                lambda argv=argv, cwd=cwd, kw=kw: subprocess.run(argv, capture_output=True, cwd=cwd, **kw),
                n,
            )
            row("LocalSandbox / subprocess.run of the same isolated argv", ours2, same, "our own layer")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="runs per measurement")
    ap.add_argument("--no-docker", action="store_true", help="only the local backend")
    args = ap.parse_args()
    if not args.no_docker:
        bench_docker(args.n)
    bench_local(args.n)


if __name__ == "__main__":
    main()
