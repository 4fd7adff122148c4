"""Where a bisect run's guesses fell among the marks its answers listed, step by step.

With ``env_config`` ``marks=K`` every bisect answer lists K numbers of the range the feedback
left (``skyrl_gym.envs.bisect.marks_of``); the middle one is the bisection guess. This reads a
run's ``trajectories.jsonl`` (the training episodes ``skyrl train`` writes to its run directory)
and prints, per step, the share of the model's first guesses and of its later guesses that were
the middle mark, another mark, a number that is not a mark, or no guess at all. The worked
examples in the prompt are skipped: only turns after the episode's own question count.

    python examples/multiturn/bisect_guesses.py runs/bisect-grpo-seed0 [more run dirs]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

KINDS = ("middle", "other mark", "not a mark", "no guess")
_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


def marks_in(text: str) -> list[int] | None:
    """The numbers of an answer's ``(marks: a, b, c)``, or None when it lists none."""
    if "(marks: " not in text:
        return None
    return [int(x) for x in text.rsplit("(marks: ", 1)[1].split(")", 1)[0].split(", ")]


def guess_kinds(messages: list[dict[str, Any]]) -> list[str]:
    """The kind of each of the episode's own guesses (:data:`KINDS`), in turn order."""
    asked = [
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and m["content"].startswith("Find the number")
    ]
    if not asked:
        return []
    listed: list[int] | None = None
    kinds = []
    for m in messages[asked[-1] :]:
        if m["role"] == "user":
            listed = marks_in(m["content"]) or listed
            continue
        if m["role"] != "assistant":
            continue
        found = _GUESS.search(m["content"])
        if found is None or listed is None:
            kinds.append("no guess")
        elif int(found.group(1)) not in listed:
            kinds.append("not a mark")
        elif listed.index(int(found.group(1))) == (len(listed) - 1) // 2:
            kinds.append("middle")
        else:
            kinds.append("other mark")
    return kinds


def by_step(path: Path) -> dict[int, tuple[Counter, Counter, int]]:
    """Per step: (first guesses by kind, later guesses by kind, episodes)."""
    steps: dict[int, tuple[Counter, Counter, int]] = defaultdict(lambda: (Counter(), Counter(), 0))
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        first, later, n = steps[episode["step"]]
        kinds = guess_kinds(episode.get("messages") or [])
        first.update(kinds[:1])
        later.update(kinds[1:])
        steps[episode["step"]] = (first, later, n + 1)
    return dict(steps)


def _shares(counts: Counter) -> str:
    total = sum(counts.values()) or 1
    return "  ".join(f"{counts[k] / total:4.2f}" for k in KINDS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories with trajectories.jsonl")
    args = ap.parse_args(argv)
    header = " / ".join(KINDS)
    for run in args.runs:
        print(f"{run.name}: share of guesses that were {header}")
        for step, (first, later, n) in sorted(by_step(run / "trajectories.jsonl").items()):
            print(
                f"  step {step:2d} ({n} episodes)  first guess  {_shares(first)}   later guesses  {_shares(later)}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
