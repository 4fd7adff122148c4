"""The main job (``skyrl train``) under several seeds at once, with one table at the end.

One run is one draw: on 2 cores the main job's held-out success has ranged from 0.88 to 0.99
over seeds with the same code. This runs ``--seeds`` side by side (each its own process, run
directory and ``--threads``), passes any further flags to every run, and prints each run's
held-out success before and after, its seconds, and the mean over seeds. It needs no installed
``skyrl`` command (it builds the ``train`` verb from ``trainers.cli``), so it also runs from a
bare checkout on a machine where only ``PYTHONPATH`` points at the project. Each run needs
11-12 GB of memory at its peak (the main job on 2026-12-05, ``/usr/bin/time -v``): two side by
side on a 24 GB machine are at the edge (one was killed by the out-of-memory killer once).

    python bench/main_job_seeds.py --run-root /tmp/seeds --seeds 0 1 2 3 --threads 4 -- --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# each run dies with this process, even after kill -9 of it (Linux: PR_SET_PDEATHSIG)
_BOOT = (
    "import argparse, os, signal, sys\n"
    "if sys.platform == 'linux':\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "    if os.getppid() != int(sys.argv.pop(1)):\n"
    "        sys.exit(1)\n"
    "else:\n"
    "    sys.argv.pop(1)\n"
    "from trainers.cli import add_command\n"
    "p = argparse.ArgumentParser(prog='skyrl')\n"
    "add_command(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(int(a.handler(a) or 0))\n"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-root", required=True, help="one run directory per seed goes under it")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    ap.add_argument("--deadline-s", type=float, default=3600.0, help="runs still going then are killed")
    ap.add_argument("train_args", nargs="*", help="flags for every run, after --")
    args = ap.parse_args()
    root = Path(args.run_root)
    root.mkdir(parents=True, exist_ok=True)
    project = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")])))
    procs = {}
    for seed in args.seeds:
        run_dir = root / f"seed-{seed}"
        cmd = [sys.executable, "-c", _BOOT, str(os.getpid()), "train", *args.train_args]
        cmd += ["--seed", str(seed), "--run-dir", str(run_dir), "--threads", str(args.threads)]
        log = open(root / f"seed-{seed}.log", "w")  # noqa: SIM115 (closed below)
        procs[seed] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=project), log)
        print(f"seed {seed}: {' '.join(cmd[4:])}", flush=True)
    deadline = time.monotonic() + args.deadline_s
    codes = {}
    for seed, (proc, log) in procs.items():
        try:
            codes[seed] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[seed] = proc.wait()
        log.close()
    finals = []
    print(f"{'seed':>4}  {'exit':>4}  {'before':>15}  {'after':>15}  {'seconds':>7}")
    for seed in args.seeds:
        summary = root / f"seed-{seed}" / "summary.json"
        if codes[seed] != 0 or not summary.exists():
            print(f"{seed:>4}  {codes[seed]:>4}  (no summary; see {root / f'seed-{seed}.log'})")
            continue
        s = json.loads(summary.read_text())
        b, f = s["baseline"], s["final"]
        finals.append(f["success"])
        print(
            f"{seed:>4}  {codes[seed]:>4}  {b['success']:.3f} +/- {b['success_se']:.3f}  "
            f"{f['success']:.3f} +/- {f['success_se']:.3f}  {s['seconds']:>7.0f}"
        )
    if finals:
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        print(
            f"held-out success after training over {len(finals)} seeds: mean {statistics.mean(finals):.3f}, sd {sd:.3f}"
        )
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
