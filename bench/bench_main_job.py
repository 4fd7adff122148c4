"""The main job (``skyrl train``) under several sets of flags, one after another in one sitting,
each against the first: time, memory and held-out success.

A memory or speed option of the trainer changes more than one figure: a release of freed memory
after each update lowers the rollouts' peak and may slow the next train step (its pages fault in
again); activation checkpointing shrinks the train step's peak and adds a forward. Runs on
different days differ by more than these options do, so this runs every variant here, one at a
time (never side by side: two runs share 2 cores and stall each other), each in its own process
and run directory with the same seed, and prints one table:

- wall clock of the whole run and the process's maximum resident size (``wait4``'s ``ru_maxrss``,
  what ``/usr/bin/time -v`` prints);
- from ``metrics.jsonl``: the train steps' seconds per trained token (episodes diverge between
  variants once an update differs, so per token, not per step), the rollouts' seconds, the
  largest rollout and train-step peaks, the resident size after each update;
- held-out success before and after (``summary.json``);
- each figure's ratio against the first variant.

    python bench/bench_main_job.py --run-root /tmp/mj \\
        --variant default= --variant release0="--release-memory-above 0" \\
        --variant release0-ckpt="--release-memory-above 0 --activation-checkpointing" \\
        -- --seed 0

Each variant is ``NAME=FLAGS`` (flags split like a shell's words; empty: the defaults), or
``NAME@COMMIT=FLAGS`` to run that commit's code (a git worktree of it, removed at the end): a
change measured against the code before it in one sitting. Flags after ``--`` go to every variant. A run still going after ``--deadline-s`` is killed, and every
run dies with this process (even after ``kill -9`` of it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # a bare checkout too

from main_job_seeds import _BOOT  # noqa: E402  (the train verb, dying with its parent)

from trainers.metrics import read_jsonl  # noqa: E402

#: Figures where a larger value is worse, with their format; the ratio column divides by the
#: first variant's value.
_FIGURES = (
    ("wall_s", "wall clock (s)", "{:.0f}"),
    ("max_rss_gb", "max RSS (GB)", "{:.2f}"),
    ("train_ms_per_token", "train ms / trained token", "{:.2f}"),
    ("rollout_s", "rollouts (s)", "{:.0f}"),
    ("rollout_peak_gb", "largest rollout peak (GB)", "{:.2f}"),
    ("train_peak_gb", "largest train-step peak (GB)", "{:.2f}"),
    ("resident_after_update_max_gb", "resident after update, max (GB)", "{:.2f}"),
)


@dataclass
class RunFigures:
    """One variant's run, read back from its run directory and its process's accounting."""

    name: str
    flags: list[str]
    exit_code: int
    wall_s: float
    max_rss_gb: float
    train_steps: int = 0
    trained_tokens: int = 0
    train_s: float = 0.0
    train_ms_per_token: float = float("nan")
    rollout_s: float = 0.0
    rollout_peak_gb: float = float("nan")
    train_peak_gb: float = float("nan")
    resident_after_update_min_gb: float = float("nan")
    resident_after_update_max_gb: float = float("nan")
    before: float | None = None
    before_se: float | None = None
    after: float | None = None
    after_se: float | None = None


def read_run(
    run_dir: Path, name: str, flags: list[str], exit_code: int, wall_s: float, max_rss_gb: float
) -> RunFigures:
    """The figures of one finished run from ``run_dir``'s ``metrics.jsonl`` and ``summary.json``
    (absent files leave their figures unset)."""
    fig = RunFigures(name=name, flags=flags, exit_code=exit_code, wall_s=wall_s, max_rss_gb=max_rss_gb)
    train = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    if train:
        fig.train_steps = len(train)
        fig.trained_tokens = sum(int(r.get("num_tokens", 0)) for r in train)
        fig.train_s = sum(float(r.get("train_seconds", 0.0)) for r in train)
        if fig.trained_tokens:
            fig.train_ms_per_token = 1000 * fig.train_s / fig.trained_tokens
        fig.rollout_s = sum(float(r.get("gen_seconds", 0.0)) for r in train)
        fig.rollout_peak_gb = max(float(r.get("mem_rollout_peak_gb", float("nan"))) for r in train)
        fig.train_peak_gb = max(float(r.get("mem_train_peak_gb", float("nan"))) for r in train)
        resident = [float(r["mem_rss_gb"]) for r in train if "mem_rss_gb" in r]
        if resident:
            fig.resident_after_update_min_gb, fig.resident_after_update_max_gb = min(resident), max(resident)
    summary = run_dir / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text(encoding="utf-8"))
        b, f = s.get("baseline") or {}, s.get("final") or {}
        fig.before, fig.before_se = b.get("success"), b.get("success_se")
        fig.after, fig.after_se = f.get("success"), f.get("success_se")
    return fig


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=FLAGS`` -> ``(NAME, [flags])``; ``NAME@REV=FLAGS`` keeps ``NAME@REV`` (see
    :func:`split_rev`)."""
    name, sep, flags = text.partition("=")
    if not sep or not name or any(c in name for c in "/ ") or name.startswith("@") or name.endswith("@"):
        raise SystemExit(
            f"--variant {text!r}: write NAME=FLAGS, e.g. default= or release0='--release-memory-above 0' "
            "(NAME@COMMIT=FLAGS runs that commit's code)"
        )
    return name, shlex.split(flags)


def split_rev(name: str) -> tuple[str, str | None]:
    """``NAME@REV`` -> ``(NAME, REV)``: the variant runs the code of commit ``REV`` (a git
    worktree of it under the run root); ``NAME`` -> ``(NAME, None)``: this checkout's."""
    base, _, rev = name.partition("@")
    return base, rev or None


def table(runs: list[RunFigures]) -> str:
    """The figures of ``runs`` as rows, each with its ratio against the first run."""
    base = runs[0]
    lines = [f"{'figure':<34}" + "".join(f"{r.name:>24}" for r in runs)]
    for key, label, fmt in _FIGURES:
        cells = []
        for r in runs:
            v, b = getattr(r, key), getattr(base, key)
            ratio = f" ({v / b:.2f}x)" if r is not base and b == b and b and v == v else ""
            cells.append(f"{fmt.format(v) + ratio:>24}")
        lines.append(f"{label:<34}" + "".join(cells))
    held = []
    for r in runs:
        if r.before is None or r.after is None:
            held.append(f"{'(no summary)':>24}")
        else:
            held.append(f"{f'{r.before:.3f} -> {r.after:.3f}':>24}")
    lines.append(f"{'held-out success':<34}" + "".join(held))
    lines.append(f"{'after, standard error':<34}" + "".join(f"{(r.after_se or 0):>24.3f}" for r in runs))
    lines.append(f"{'exit code':<34}" + "".join(f"{r.exit_code:>24}" for r in runs))
    return "\n".join(lines)


def worktree(root: Path, rev: str) -> str:
    """A detached git worktree of ``rev`` under ``root`` (made once; removed by :func:`main`)."""
    repo = Path(__file__).resolve().parent.parent
    tree = root / f"tree-{rev}"
    if not tree.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), rev], cwd=repo, check=True, capture_output=True
        )
    return str(tree)


def run_variant(root: Path, name: str, flags: list[str], common: list[str], deadline_s: float) -> RunFigures:
    """One run of the train verb with ``common + flags`` into ``root/name``; waits for it. A name
    ``NAME@REV`` runs commit ``REV``'s code (its worktree first on ``PYTHONPATH``, the same
    interpreter and installed packages) into ``root/NAME``."""
    name, rev = split_rev(name)
    project = worktree(root, rev) if rev else str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")])))
    run_dir = root / name
    cmd = [sys.executable, "-c", _BOOT, str(os.getpid()), "train", *common, *flags, "--run-dir", str(run_dir)]
    print(f"[{name}] skyrl {' '.join(shlex.quote(c) for c in cmd[4:])}", flush=True)
    start = time.monotonic()
    with open(root / f"{name}.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=project)
        deadline = start + deadline_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped by wait4 above
    max_rss_gb = usage.ru_maxrss * 1024 / 1e9  # kilobytes on Linux
    fig = read_run(run_dir, f"{name}@{rev}" if rev else name, flags, code, wall, max_rss_gb)
    print(f"[{name}] exit {code}, {wall:.0f} s, max RSS {max_rss_gb:.2f} GB", flush=True)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-root", required=True, help="one run directory (and log) per variant goes under it")
    ap.add_argument(
        "--variant", action="append", required=True, help="NAME=FLAGS; the first is the ratio base"
    )
    ap.add_argument("--deadline-s", type=float, default=1800.0, help="a run still going then is killed")
    ap.add_argument("--json", default=None, help="also write every run's figures to this file")
    ap.add_argument("train_args", nargs="*", help="flags for every variant, after --")
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("bench_main_job reads wait4's ru_maxrss in kilobytes: Linux only")
    variants = [parse_variant(v) for v in args.variant]
    names = [n for n, _ in variants]
    if len({split_rev(n)[0] for n in names}) != len(names):
        raise SystemExit(f"variant names must differ, got {names}")
    root = Path(args.run_root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        runs = [run_variant(root, name, flags, args.train_args, args.deadline_s) for name, flags in variants]
    finally:
        for rev in {split_rev(n)[1] for n in names} - {None}:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(root / f"tree-{rev}")],
                cwd=Path(__file__).resolve().parent.parent,
                capture_output=True,
            )
    print()
    print(f"common flags: {' '.join(args.train_args) or '(none)'}")
    for r in runs:
        print(f"  {r.name}: {' '.join(r.flags) or '(defaults)'}")
    print(table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n", encoding="utf-8")
    return 0 if all(r.exit_code == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
