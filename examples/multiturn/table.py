"""The comparison table of the multi-turn recipes, built from committed run results.

Each run is a folder ``results/multiturn/<env>-<estimator>-seed<S>/`` holding its run's
``summary.json`` and ``metrics.jsonl`` (copied by ``--collect RUN_DIR``). The table has one row
per run (every seed, failures included) and one mean row per (env, estimator)::

    python examples/multiturn/table.py --collect /tmp/mt/kv-grpo-s0 --name kvchain-grpo-seed0
    python examples/multiturn/table.py --write      # the table in docs/multiturn-comparison.md

``tests/docs/test_multiturn_table.py`` checks that the page holds what this prints.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

from trainers.config import saved_settings

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "multiturn"
PAGE = ROOT / "docs" / "multiturn-comparison.md"
START, END = "<!-- table: examples/multiturn/table.py -->", "<!-- end of table -->"

#: the per-turn metric of each env (held-out, per episode), reported before -> after
PER_TURN = {"kvchain": "hops_followed", "bisect": "consistent_guesses", "text2sql": "schema_before_use"}


def collect(run_dir: Path, name: str) -> Path:
    """Copy ``run_dir``'s summary, metrics log and plot to ``results/multiturn/<name>``."""
    out = RESULTS / name
    out.mkdir(parents=True, exist_ok=True)
    for f in ("summary.json", "metrics.jsonl", "metrics.png", "config.json"):
        if (run_dir / f).exists():
            shutil.copy(run_dir / f, out / f)
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("plot", None)  # a path on the machine that ran it
    for key in ("baseline", "final"):  # per-row success is in metrics; keep the file small
        if summary.get(key):
            summary[key].pop("per_prompt", None)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return out


def _run_row(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    config = saved_settings(folder)  # either layout of config.json, as flat settings
    before, after = summary["baseline"], summary["final"]
    metric = PER_TURN.get(summary["env"], "")
    se = math.hypot(before["success_se"], after["success_se"])
    return {
        "run": folder.name,
        "env": summary["env"],
        "advantage": config.get("advantage", "?"),
        "seed": config.get("seed", "?"),
        "recipe": _recipe(config),
        "before": before["success"],
        "before_se": before["success_se"],
        "after": after["success"],
        "after_se": after["success_se"],
        "gain_se": (after["success"] - before["success"]) / se if se > 0 else float("nan"),
        "metric": metric,
        "metric_before": before["env_metrics"].get(metric),
        "metric_after": after["env_metrics"].get(metric),
        "turns_before": before.get("turns_mean"),
        "turns_after": after.get("turns_mean"),
        "turns_won_after": after.get("turns_success_mean"),
        "minutes": summary["seconds"] / 60,
    }


def _recipe(config: dict) -> str:
    """The budget a run trained with (updates, episodes per update, learning rate, held-out rows,
    the loss reduction when it is not ``token_mean``) and its env's settings (``--env-config``),
    which make a different task."""
    if not config:
        return "?"
    recipe = (
        f"{config['steps']} x {config['prompts_per_step'] * config['group_size']} eps, "
        f"lr {config['lr']:g}, eval {config['eval_prompts']} x {config['eval_samples']}"
    )
    if config.get("reduction", "token_mean") != "token_mean":  # the loss's shape, when not the default
        recipe += f", {config['reduction']}"
    # a db_path says where the run's databases were on its machine, not how the task was set
    env_config = [
        e for e in config.get("env_config") or [] if e.split("=", 1)[0].rsplit(".", 1)[-1] != "db_path"
    ]
    return f"{recipe}; {' '.join(env_config)}" if env_config else recipe


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table(results: Path = RESULTS) -> str:
    rows = [_run_row(f) for f in sorted(results.iterdir()) if (f / "summary.json").exists()]
    lines = [
        "| run | env | estimator | seed | recipe | held-out success before -> after | gain (SE) "
        "| per-turn metric before -> after | turns per episode before -> after | turns per success after | minutes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['env']} | {r['advantage']} | {r['seed']} | {r['recipe']} "
            f"| {_f(r['before'])} +/- {_f(r['before_se'])} -> {_f(r['after'])} +/- {_f(r['after_se'])} "
            f"| {_f(r['gain_se'], 1)} | {r['metric']} {_f(r['metric_before'], 2)} -> {_f(r['metric_after'], 2)} "
            f"| {_f(r['turns_before'], 2)} -> {_f(r['turns_after'], 2)} | {_f(r['turns_won_after'], 2)} "
            f"| {_f(r['minutes'], 1)} |"
        )
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["env"], r["recipe"], r["advantage"]), []).append(r)
    lines += [
        "",
        "| env | recipe | estimator | seeds | held-out success after, mean +/- SE over seeds | gain, mean over seeds "
        "| per-turn metric after, mean over seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for (env, recipe, adv), rs in sorted(groups.items()):
        after = [r["after"] for r in rs]
        mean = sum(after) / len(after)
        se = (
            math.sqrt(sum((a - mean) ** 2 for a in after) / (len(after) - 1) / len(after))
            if len(after) > 1
            else None
        )
        gain = sum(r["after"] - r["before"] for r in rs) / len(rs)
        metric = [r["metric_after"] for r in rs if r["metric_after"] is not None]
        metric_mean = sum(metric) / len(metric) if metric else None
        lines.append(
            f"| {env} | {recipe} | {adv} | {len(rs)} | {_f(mean)} +/- {_f(se)} | {gain:+.3f} "
            f"| {rs[0]['metric']} {_f(metric_mean, 2)} |"
        )
    by_k = per_k_table(results)
    if by_k:
        lines += [
            "",
            "kvchain's held-out success by chain length k (a chain of k hops needs k + 1 turns), before -> after:",
            "",
            by_k.rstrip("\n"),
        ]
    return "\n".join(lines) + "\n"


def per_k_table(results: Path = RESULTS) -> str:
    """kvchain's held-out success by chain length k, before -> after, one row per run (every run;
    a k a run did not evaluate reads n/a)."""
    runs = []
    for f in sorted(results.iterdir()):
        if not (f / "summary.json").exists():
            continue
        summary = json.loads((f / "summary.json").read_text())
        if summary["env"] == "kvchain":
            runs.append((f.name, summary["baseline"]["env_metrics"], summary["final"]["env_metrics"]))
    ks = sorted(
        {
            int(key.removeprefix("success_k"))
            for _, b, a in runs
            for key in (*b, *a)
            if key.startswith("success_k")
        }
    )
    if not ks:
        return ""
    lines = ["| run | " + " | ".join(f"k = {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, before, after in runs:
        cells = [f"{_f(before.get(f'success_k{k}'), 2)} -> {_f(after.get(f'success_k{k}'), 2)}" for k in ks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def page_with_table(text: str, body: str) -> str:
    """``text`` (the page) with the part between the markers replaced by ``body``."""
    if START not in text or END not in text:
        raise ValueError(f"{PAGE} lacks the markers {START!r} and {END!r}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{body}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collect", type=Path, default=None, help="a finished run directory to copy in")
    ap.add_argument("--name", default=None, help="its folder name: <env>-<estimator>-seed<S>")
    ap.add_argument("--write", action="store_true", help=f"write the table into {PAGE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.collect is not None:
        if not args.name:
            ap.error("--collect needs --name")
        print(collect(args.collect, args.name), file=sys.stderr)
        return 0
    if args.write:
        PAGE.write_text(page_with_table(PAGE.read_text(encoding="utf-8"), table()), encoding="utf-8")
        return 0
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
