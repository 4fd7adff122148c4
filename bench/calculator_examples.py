"""How the calculator prompt's worked examples steer the bundled model on the two question shapes
that differ only by parentheses, ``a + b * c`` and ``(a + b) * c``, before any training.

GRPO can only reinforce what the sampler sometimes does: a question shape whose samples never
copy the expression exactly into the call gives no right answer to learn from, and a shape whose
samples often change the parentheses gives the run a wrong habit to learn. This samples the
untrained model with the main job's sampler (its seed, bf16 where native, temperature and token
budget) on *training* questions of both shapes under each set of worked examples and prints, per
shape, how often the first reply's call expression is the question's exactly, has parentheses
added or dropped, is something else, or there is no ``<tool_call>`` at all, and the episode
success. The expression is read even from a call whose JSON is malformed (the untrained model
often leaves out its quotes): this measures the parenthesis habit, not the format. No held-out
question is used. About 80 s a set on 2 cores with the defaults (16 questions a shape, 8 samples).

``--summaries`` instead reads main-job ``summary.json`` files (``skyrl train``, calculator env)
and prints held-out success per question shape before and after, from their ``per_prompt``
rates (the held-out questions are regenerated from the seed in their ids); no model is loaded.

    python bench/calculator_examples.py
    python bench/calculator_examples.py --summaries docs/measurements/main-job-2026-12-05-*.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from skyrl_gym.envs.calculator import _EXAMPLES, generate_calculator_rows  # noqa: E402

# name -> worked examples (question, expression, value)
_PLAIN = ("What is 12 + 4 * 7?", "12 + 4 * 7", 40)
SETS = {
    # the env's examples: a * b + c, then two (a + b) * c
    "default": _EXAMPLES,
    # the first replaced by a + b * c, the shape that differs from the others only by the
    # parentheses (the same length)
    "precedence": (_PLAIN, *_EXAMPLES[1:]),
    # the same three, the plain one read last
    "precedence-last": (*_EXAMPLES[1:], _PLAIN),
    # a + b * c, (a + b) * c, a + b * c
    "balanced": (_PLAIN, _EXAMPLES[1], ("Calculate 14 + 7 * 3.", "14 + 7 * 3", 35)),
}
_EXPR_RE = re.compile(r'"expr"\s*:\s*"?([^"}]*)')


def shape(expr: str) -> str:
    return re.sub(r"\d+", "N", expr)


def classify(question_expr: str, call_text: str | None) -> str:
    """``exact``, ``parens added``, ``parens dropped``, ``other`` or ``no call``."""
    if call_text is None:
        return "no call"
    m = _EXPR_RE.search(call_text)
    if m is None:
        return "other"
    got = " ".join(m.group(1).split())
    want = " ".join(question_expr.split())
    if got == want:
        return "exact"
    bare = lambda s: s.replace("(", "").replace(")", "").replace(" ", "")  # noqa: E731
    if bare(got) == bare(want):
        return "parens added" if got.count("(") > want.count("(") else "parens dropped"
    return "other"


def by_shape(path: str) -> None:
    """Print held-out success per question shape of one main-job summary, before and after."""
    from trainers.evaluation import success_by

    summary = json.loads(Path(path).read_text())
    ids = list((summary.get("final") or summary.get("baseline") or {}).get("per_prompt") or {})
    if summary.get("env") != "calculator" or not ids:
        print(f"{path}: not a calculator run with per-prompt rates; skipped")
        return
    seed = int(ids[0].split("-")[2])  # ids are calc-test-<seed>-<index>
    rows = generate_calculator_rows(len(ids), split="test", seed=seed)
    kind_of = {r["id"]: shape(r["expr"]) for r in rows}
    print(f"{path} (seed {seed}, {summary.get('seconds', 0):.0f} s)")
    for key in ("baseline", "final"):
        res = summary.get(key)
        if res:
            rates = success_by(res["per_prompt"], kind_of)
            cells = "  ".join(f"{k} {v:.2f}" for k, v in rates.items())
            print(f"  {key:<8} {res['success']:.3f} +/- {res['success_se']:.3f}   {cells}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--prompts-per-shape", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per question")
    ap.add_argument("--seed", type=int, default=0, help="which training questions and sampling seed")
    ap.add_argument("--show", type=int, default=0, help="print this many first replies of each kind")
    ap.add_argument(
        "--summaries", nargs="+", default=None, help="main-job summary.json files: success by shape"
    )
    args = ap.parse_args()
    if args.summaries:
        for path in args.summaries:
            by_shape(path)
        return 0
    import torch

    from skyrl_agent.models import bf16_is_native
    from skyrl_agent.tasks import row_to_item
    from trainers.config import TrainConfig
    from trainers.distributed import SINGLE
    from trainers.models import _sampler, build_model
    from trainers.rollouts import play

    cfg = TrainConfig(seed=args.seed)  # the main job's settings: sampler, temperature, budgets
    cfg = dataclasses.replace(cfg, bf16=bf16_is_native(torch.device("cpu")))
    dist = dataclasses.replace(SINGLE, single_device=torch.device("cpu"))
    model, tokenizer, _ = build_model(cfg, dist)
    policy = _sampler(cfg, model, tokenizer, dist)
    pool = generate_calculator_rows(cfg.train_prompts, split="train", seed=args.seed)
    picked: dict[str, list[str]] = {"N + N * N": [], "(N + N) * N": []}
    for row in pool:
        bucket = picked.get(shape(row["expr"]))
        if bucket is not None and len(bucket) < args.prompts_per_shape:
            bucket.append(row["id"])
    ids = {i for v in picked.values() for i in v}
    print(
        f"{len(ids)} training questions (seed {args.seed}) x {args.n} samples, temperature "
        f"{cfg.temperature}, {cfg.max_tokens_per_turn} tokens a turn, bf16 {cfg.bf16}"
    )
    print(
        f"{'examples':<12} {'shape':<12} {'exact':>6} {'added':>6} {'dropped':>8} {'other':>6} {'no call':>8} {'success':>8}"
    )
    for name in args.sets:
        rows = generate_calculator_rows(cfg.train_prompts, split="train", seed=args.seed, examples=SETS[name])
        rows = [r for r in rows if r["id"] in ids]
        items = [row_to_item(r, where=f"row {i}", default_id=str(i)) for i, r in enumerate(rows)]
        trajs = play(policy, items, cfg, n_samples=args.n, seed=args.seed + 17)
        expr_of = {r["id"]: r["expr"] for r in rows}
        n_prompt = {r["id"]: len(r["prompt"]) for r in rows}
        counts: dict[str, Counter] = defaultdict(Counter)
        success: dict[str, list[float]] = defaultdict(list)
        shown: Counter = Counter()
        for t in trajs:
            q = expr_of[t.prompt_id]
            first = (
                t.messages[n_prompt[t.prompt_id]]["content"]
                if len(t.messages) > n_prompt[t.prompt_id]
                else ""
            )
            kind = classify(q, first if "<tool_call>" in first else None)
            counts[shape(q)][kind] += 1
            if shown[shape(q), kind] < args.show:
                shown[shape(q), kind] += 1
                print(f"  [{name}] {q!r} {kind}: {first[:160]!r}")
            success[shape(q)].append(float(bool(t.env_metrics.get("correct", False))))
        for sh in picked:
            c = counts[sh]
            total = sum(c.values()) or 1
            cells = [c[k] / total for k in ("exact", "parens added", "parens dropped", "other", "no call")]
            rate = sum(success[sh]) / max(len(success[sh]), 1)
            print(
                f"{name:<12} {sh:<12} {cells[0]:>6.2f} {cells[1]:>6.2f} {cells[2]:>8.2f} {cells[3]:>6.2f} "
                f"{cells[4]:>8.2f} {rate:>8.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
