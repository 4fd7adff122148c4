"""Do two commits train the same? Short deterministic runs in each, compared number by number.

For refactors that must not move numbers (issue 47: "for the same seed, the same training
statistics and weights as before"). Each variant runs ``skyrl train`` for two steps of a tiny
random model on an env whose reward depends on what was sampled (so the gradients are not zero),
in a worktree of ``--against`` and in this checkout, and compares every logged metric that is
not a time or a memory figure, the checkpoint's weights (bytes) and its optimizer and RNG state
(tensor by tensor)::

    python bench/same_numbers.py --against cb96183          # prints IDENTICAL or the differences

Variants: ``plain`` (one row per episode), ``step_wise`` (one row per turn), ``skip_flat`` (groups
of equal rewards left out, the default filter), ``gigpo`` and ``mt_grpo`` (turn-level advantages). Exit code 0
when every variant is identical, 1 otherwise. About a minute a variant and commit on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ENV_MODULE = '''
import skyrl_gym
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput


class LenEnv(BaseTextEnv):
    """Three turns; each turn's reward (len(action) % 3) / 2 depends on what was sampled."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.n = 0

    def step(self, action):
        self.n += 1
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"again {self.n}"}],
            reward=(len(action) % 3) / 2,
            done=self.n >= 3,
        )


skyrl_gym.register("same-numbers-len", "same_numbers_env:LenEnv")
'''

VARIANTS = {
    "plain": ["--no-skip-equal-reward-groups"],
    "step_wise": ["--no-skip-equal-reward-groups", "--step-wise"],
    # the group filter (flat groups left out) and the turn-level estimators' per-turn reading
    "skip_flat": [],
    "gigpo": ["--no-skip-equal-reward-groups", "--advantage", "gigpo"],
    "mt_grpo": ["--no-skip-equal-reward-groups", "--advantage", "mt_grpo"],
}

#: Metric names holding times or memory figures, which differ between any two runs.
_VOLATILE = ("seconds", "mem_", "time", "wall", "rate", "_s", "peak", "rss", "tokens_per")


def _run(tree: Path, work: Path, variant: str) -> list[str]:
    run_dir = work / f"{tree.name}-{variant}"
    cmd = [
        sys.executable, "-m", "skyrl_gym", "train",
        "--import", str(work / "same_numbers_env.py"), "--env", "same-numbers-len",
        "--data", str(work / "rows.jsonl"), "--eval-data", str(work / "rows.jsonl"),
        "--model", str(work / "model"), "--run-dir", str(run_dir),
        "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--train-prompts", "20",
        "--eval-prompts", "4", "--eval-samples", "2", "--max-turns", "3", "--max-tokens-per-turn", "8",
        "--no-bf16", "--threads", "1", "--temperature", "1.0", "--no-progress",
        "--seed", "3", *VARIANTS[variant],
    ]  # fmt: skip
    proc = subprocess.run(
        cmd,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree} {variant}: skyrl train failed:\n{proc.stderr[-3000:]}")
    return _digest(run_dir)


def _digest(run_dir: Path) -> list[str]:
    import torch

    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        d = json.loads(line)
        out.append(json.dumps({k: v for k, v in sorted(d.items()) if not any(x in k for x in _VOLATILE)}))
    for f in sorted((run_dir / "checkpoints").rglob("*.safetensors")):
        out.append(f"{f.relative_to(run_dir)} {hashlib.sha256(f.read_bytes()).hexdigest()[:16]}")

    def walk(x: object, path: str) -> None:
        if isinstance(x, torch.Tensor):
            data = x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            out.append(f"{path} {hashlib.sha256(data).hexdigest()[:16]}")
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                walk(x[k], f"{path}/{k}")
        elif isinstance(x, list | tuple):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")

    for f in sorted((run_dir / "checkpoints").rglob("trainer.pt")):
        walk(torch.load(f, map_location="cpu", weights_only=False), str(f.relative_to(run_dir)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="the commit to compare this checkout with")
    ap.add_argument("--variant", choices=sorted(VARIANTS), action="append", help="default: all")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="same-numbers-") as tmp:
        work = Path(tmp)
        (work / "same_numbers_env.py").write_text(ENV_MODULE)
        rows = [{"prompt": [{"role": "user", "content": f"say something {i}"}]} for i in range(24)]
        (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        from skyrl_agent.models import tiny_random_model

        model, tok = tiny_random_model(hidden_size=32, num_layers=1)
        model.save_pretrained(work / "model")
        tok.save_pretrained(work / "model")
        old = work / "against"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.against], cwd=REPO, check=True,
                       capture_output=True)  # fmt: skip
        same = True
        try:
            for variant in args.variant or sorted(VARIANTS):
                before, after = _run(old, work, variant), _run(REPO, work, variant)
                if before == after:
                    print(
                        f"{variant}: IDENTICAL ({len(after)} metric lines and tensors, against {args.against})"
                    )
                    continue
                same = False
                print(f"{variant}: DIFFERENT from {args.against}")
                for a, b in zip(before, after, strict=False):
                    if a != b:
                        print(f"  before: {a[:300]}\n  after:  {b[:300]}")
                if len(before) != len(after):
                    print(f"  {len(before)} lines before, {len(after)} after")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, capture_output=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
