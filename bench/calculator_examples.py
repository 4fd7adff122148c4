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
``--trajectories`` reads main-job ``trajectories.jsonl`` files and prints, per training step
and question shape, the episodes, their success and what their first call did to the expression
(copied, parentheses added or dropped, parentheses that do not balance, other, no call): where a
run picked up a habit that cost it a shape. ``--write-rows DIR`` writes the main job's training and held-out rows of ``--seed`` with each
set's examples, for ``skyrl train --data ... --eval-data ...`` (the same questions as the
bundled rows; pass ``--stratify-by shape`` to spread them as the bundled rows are).

    python bench/calculator_examples.py
    python bench/calculator_examples.py --summaries results/main-job/main-job-2026-12-05-*.json
    python bench/calculator_examples.py --trajectories runs/calculator/trajectories.jsonl
    python bench/calculator_examples.py --write-rows /tmp/rows --sets balanced --seed 3
    skyrl train --seed 3 --data /tmp/rows/balanced-train-3.jsonl --eval-data /tmp/rows/balanced-test-3.jsonl
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
_TIMES = ("What is 12 * 4 + 7?", "12 * 4 + 7", 55)
_PAREN1 = ("Compute (9 + 3) * 5.", "(9 + 3) * 5", 60)
_PAREN2 = ("Calculate (14 + 7) * 3.", "(14 + 7) * 3", 63)
_PLAIN = ("What is 12 + 4 * 7?", "12 + 4 * 7", 40)
_PLAIN2 = ("Calculate 14 + 7 * 3.", "14 + 7 * 3", 35)
SETS = {
    # the env's examples (since 2026-12-05 the set "two-each-paren-first" below)
    "default": _EXAMPLES,
    # the env's examples until 2026-12-05 (the files of that day call them "default"):
    # a * b + c, then two (a + b) * c
    "three": (_TIMES, _PAREN1, _PAREN2),
    # its first replaced by a + b * c, the shape that differs from the others only by the
    # parentheses (the same length)
    "precedence": (_PLAIN, _PAREN1, _PAREN2),
    # the same three, the plain one read last
    "precedence-last": (_PAREN1, _PAREN2, _PLAIN),
    # a + b * c, (a + b) * c, a + b * c
    "balanced": (_PLAIN, _PAREN1, _PLAIN2),
    # two of each, alternating: a + b * c, (a + b) * c, a + b * c, (a + b) * c
    "two-each": (_PLAIN, _PAREN1, _PLAIN2, _PAREN2),
    # the same four, a parenthesized one first
    "two-each-paren-first": (_PAREN1, _PLAIN, _PAREN2, _PLAIN2),
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


def by_step(path: str) -> None:
    """Print, per training step and question shape of one main-job ``trajectories.jsonl``, the
    episodes, their success and what their first call did to the question's expression (as
    :func:`classify`, with a call whose parentheses do not balance counted apart)."""
    from trainers.config import TrainConfig

    kinds = ("exact", "parens added", "parens dropped", "unbalanced", "other", "no call")
    rows: dict[str, dict] = {}
    table: dict[tuple[int, str], Counter] = defaultdict(Counter)
    for line in Path(path).read_text().splitlines():
        t = json.loads(line)
        if t["prompt_id"] not in rows:  # ids are calc-train-<seed>-<index>
            seed = int(t["prompt_id"].split("-")[2])
            n = TrainConfig().train_prompts  # the main job's training rows
            rows.update({r["id"]: r for r in generate_calculator_rows(n, split="train", seed=seed)})
        row = rows[t["prompt_id"]]
        n_prompt = len(row["prompt"])
        first = t["messages"][n_prompt]["content"] if len(t["messages"]) > n_prompt else ""
        kind = classify(row["expr"], first if "<tool_call>" in first else None)
        m = _EXPR_RE.search(first)
        if kind != "no call" and m is not None and m.group(1).count("(") != m.group(1).count(")"):
            kind = "unbalanced"
        cell = table[t["step"], shape(row["expr"])]
        cell[kind] += 1
        cell["n"] += 1
        cell["success"] += bool((t.get("env_metrics") or {}).get("correct"))
    print(f"{path}: per step and question shape, episodes, success, and the first call's expression")
    print(f"{'step':>4} {'shape':<12} {'n':>3} {'success':>7}  " + "  ".join(f"{k:>7}" for k in kinds))
    for (step, sh), c in sorted(table.items()):
        cells = "  ".join(f"{c[k]:>7}" for k in kinds)
        print(f"{step:>4} {sh:<12} {c['n']:>3} {c['success']:>7}  {cells}")


def write_rows(out: Path, sets: list[str], seed: int) -> None:
    """The main job's training and held-out rows with each set's worked examples: the same
    questions as the bundled rows of ``--seed`` (so ``skyrl train --seed S --data ... --eval-data
    ...`` differs from the default run only by the examples)."""
    from trainers.config import TrainConfig

    cfg = TrainConfig(seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in sets:
        for split, n in (("train", cfg.data.train_prompts), ("test", cfg.data.eval_prompts)):
            path = out / f"{name}-{split}-{seed}.jsonl"
            rows = generate_calculator_rows(n, split=split, seed=seed, examples=SETS[name])
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            print(f"{path}  {len(rows)} rows")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=["default", "three", "balanced"], choices=list(SETS))
    ap.add_argument("--prompts-per-shape", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per question")
    ap.add_argument("--seed", type=int, default=0, help="which training questions and sampling seed")
    ap.add_argument("--show", type=int, default=0, help="print this many first replies of each kind")
    ap.add_argument(
        "--summaries", nargs="+", default=None, help="main-job summary.json files: success by shape"
    )
    ap.add_argument(
        "--write-rows",
        metavar="DIR",
        default=None,
        help="write the main job's rows under each set instead (DIR/<set>-{train,test}-<seed>.jsonl, "
        "400 and 64 rows, the questions of --seed) for skyrl train --data/--eval-data",
    )
    ap.add_argument(
        "--trajectories",
        nargs="+",
        default=None,
        help="main-job trajectories.jsonl files: per step and shape, success and the first call",
    )
    args = ap.parse_args()
    if args.trajectories:
        for path in args.trajectories:
            by_step(path)
        return 0
    if args.summaries:
        for path in args.summaries:
            by_shape(path)
        return 0
    if args.write_rows:
        write_rows(Path(args.write_rows), args.sets, args.seed)
        return 0
    import torch

    from skyrl_agent.models import bf16_is_native
    from skyrl_agent.tasks import row_to_item
    from trainers.config import TrainConfig
    from trainers.distributed import SINGLE
    from trainers.models import _sampler, build_model
    from trainers.rollouts import play

    cfg = TrainConfig(seed=args.seed)  # the main job's settings: sampler, temperature, budgets
    cfg = cfg.replace(bf16=bf16_is_native(torch.device("cpu")))
    dist = dataclasses.replace(SINGLE, single_device=torch.device("cpu"))
    model, tokenizer, _ = build_model(cfg, dist)
    policy = _sampler(cfg, model, tokenizer, dist)
    pool = generate_calculator_rows(cfg.data.train_prompts, split="train", seed=args.seed)
    picked: dict[str, list[str]] = {"N + N * N": [], "(N + N) * N": []}
    for row in pool:
        bucket = picked.get(shape(row["expr"]))
        if bucket is not None and len(bucket) < args.prompts_per_shape:
            bucket.append(row["id"])
    ids = {i for v in picked.values() for i in v}
    print(
        f"{len(ids)} training questions (seed {args.seed}) x {args.n} samples, temperature "
        f"{cfg.rollout.sampling.temperature}, {cfg.rollout.max_tokens_per_turn} tokens a turn, bf16 {cfg.model.bf16}"
    )
    print(
        f"{'examples':<12} {'shape':<12} {'exact':>6} {'added':>6} {'dropped':>8} {'other':>6} {'no call':>8} {'success':>8}"
    )
    for name in args.sets:
        rows = generate_calculator_rows(
            cfg.data.train_prompts, split="train", seed=args.seed, examples=SETS[name]
        )
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
