"""examples/multiturn/bisect_guesses.py: the kind of each guess among the marks its answer listed,
checked on an episode the env itself plays."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import skyrl_gym
from skyrl_gym.envs.bisect import generate_bisect_rows

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "multiturn" / "bisect_guesses.py"


def _module():  # noqa: ANN202 - the example script as a module
    spec = importlib.util.spec_from_file_location("bisect_guesses", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _played(actions):
    row = generate_bisect_rows(1, split="test")[0]
    extras = {k: row[k] for k in ("lo", "hi", "size", "budget", "depth", "seed", "split", "reward_spec")}
    extras["reward_spec"] = {
        "ground_truth": row["hi"]
    }  # the target is the top: every wrong guess is "higher"
    env = skyrl_gym.make(
        "bisect", env_config={"examples": 2, "feedback": "interval", "marks": 7}, extras=extras
    )
    messages, _ = env.init(row["prompt"])
    for action in actions(messages):
        messages.append({"role": "assistant", "content": action})
        out = env.step(action)
        messages += out.observations
        if out.done:
            break
    return row, messages


def test_guess_kinds_of_a_played_episode(tmp_path):
    mod = _module()

    def last_marks(messages):
        return next(mod.marks_in(m["content"]) for m in reversed(messages) if "(marks: " in m["content"])

    def actions(messages):
        yield f"<guess>{last_marks(messages)[3]}</guess>"  # the middle of 7
        yield "I think it is big"  # no guess
        yield f"<guess>{last_marks(messages)[1]}</guess>"  # another mark of the last answer with marks
        yield f"<guess>{last_marks(messages)[1] + 100}</guess>"  # out of range: not a mark

    _, messages = _played(actions)
    # the worked examples' guesses (all at the middle mark) come before the question: not counted
    assert sum(m["role"] == "assistant" for m in messages) > 4
    assert mod.guess_kinds(messages) == ["middle", "no guess", "other mark", "not a mark"]
    (tmp_path / "trajectories.jsonl").write_text(json.dumps({"step": 1, "messages": messages}) + "\n")
    [(step, (first, later, n))] = mod.by_step(tmp_path / "trajectories.jsonl").items()
    assert (step, n, dict(first)) == (1, 1, {"middle": 1})
    assert dict(later) == {"no guess": 1, "other mark": 1, "not a mark": 1}
