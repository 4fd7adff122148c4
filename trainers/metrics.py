"""Metrics to JSONL (always), the run's trackers (TensorBoard, W&B, MLflow) and PNG plots.

Every record is one JSON line ``{"step": N, "kind": "train" | "eval", ...}`` in
``<run_dir>/metrics.jsonl``. On resume, :func:`truncate_jsonl` drops lines written after the
checkpoint's step, so the file never holds a step twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError
from trainers.trackers import Tracker, numeric, open_trackers

__all__ = ["MetricsLogger", "truncate_jsonl", "read_jsonl", "plot_metrics"]


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a JSONL file (a torn last line, from a kill mid-write, is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def truncate_jsonl(path: str | os.PathLike, max_step: int, key: str = "step") -> int:
    """Keep only records with ``record[key] <= max_step``; returns how many were dropped."""
    p = Path(path)
    if not p.exists():
        return 0
    records = read_jsonl(p)
    kept = [r for r in records if r.get(key, 0) <= max_step]
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, p)
    return len(records) - len(kept)


class MetricsLogger:
    """Append metrics records to ``metrics.jsonl`` and hand their numbers to the run's trackers
    (:mod:`trainers.trackers`: TensorBoard, W&B, MLflow)."""

    def __init__(
        self, run_dir: str | os.PathLike, tensorboard: bool = True, trackers: Sequence[Tracker] | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if trackers is None:  # TensorBoard when installed, as before trackers were configurable
            trackers = []
            if tensorboard:
                try:
                    trackers = open_trackers(["tensorboard"], self.run_dir, {})
                except ConfigError:
                    trackers = []
        self.trackers = list(trackers)

    def log(self, step: int, kind: str, values: Mapping[str, Any]) -> None:
        """Write one record; its numeric values also go to every tracker as ``kind/name``."""
        record = {"step": step, "kind": kind, **values}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
            fh.flush()
        nums = numeric(values)
        for tracker in self.trackers:
            tracker.log(step, kind, nums)

    def log_file(self, path: str | os.PathLike) -> None:
        """Hand a file made at the end (the plot) to the trackers."""
        for tracker in self.trackers:
            tracker.log_file(Path(path))

    def close(self) -> None:
        """Flush and finish every tracker (idempotent)."""
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


_PANELS = (
    ("reward_mean", "reward (train batch)"),
    ("success", "held-out success"),
    ("kl", "KL to reference (0 unless kl_coef > 0)"),
    ("entropy", "entropy (nats/token)"),
    ("response_tokens_mean", "generated tokens per episode"),
    ("tokens_per_s", "training throughput (tokens/s)"),
    ("turns_mean", "turns per episode (train batch; held-out)"),
    ("env/*", "env metrics, held-out (per episode, averaged)"),
    ("sampling_rounds|context_rewrites_mean", "sampling rounds / context rewrites per step"),
)


def plot_metrics(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Draw reward, held-out success, KL, entropy, lengths, throughput, turns per episode, the
    env's held-out metrics and the sampling rounds / context rewrites to ``metrics.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / "metrics.jsonl")
    fig, axes = plt.subplots(3, 3, figsize=(13, 10))
    for ax, (key, title) in zip(axes.flat, _PANELS, strict=True):
        if key == "env/*" or "|" in key:  # several series in one panel, one line each
            names = (
                sorted({k for r in records if r.get("kind") == "eval" for k in r if k.startswith("env/")})
                if key == "env/*"
                else key.split("|")
            )
            for name in names:
                pts = [(r["step"], r[name]) for r in records if isinstance(r.get(name), (int, float))]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, "-o", markersize=3, label=name.removeprefix("env/"))
            ax.set_title(title)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
            continue
        for kind, style in (("train", "-o"), ("eval", "-s")):
            pts = [
                (r["step"], r[key])
                for r in records
                if r.get("kind") == kind and isinstance(r.get(key), (int, float))
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, style, markersize=3, label=kind)
                if key == "success" and kind == "eval":
                    errs = [r.get("success_se", 0.0) for r in records if r.get("kind") == "eval" and key in r]
                    ax.errorbar(xs, ys, yerr=errs, fmt="none", capsize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(out) if out is not None else run_dir / "metrics.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
