"""A training run killed with SIGKILL at a random step resumes exactly where it stopped.

The killed run takes its settings from a config file (``--config``); the resumed one is given
only ``--run-dir`` and ``--resume`` and reads them back from the run's ``config.json``: the
round trip file -> run -> resolved config -> resume of decision 0033."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from trainers.config import config_from_flags
from trainers.data import PromptSampler, load_items

pytestmark = pytest.mark.slow

STEPS, PROMPTS, GROUP = 6, 2, 2


def _cmd(model_dir, run_dir, resume=False):
    cmd = [
        sys.executable, "-m", "skyrl_gym", "train",
        "--model", str(model_dir), "--run-dir", str(run_dir),
        "--steps", str(STEPS), "--prompts-per-step", str(PROMPTS), "--group-size", str(GROUP),
        "--train-prompts", "20", "--eval-prompts", "0", "--max-tokens-per-turn", "6",
        "--checkpoint-every", "1", "--no-bf16", "--no-skip-equal-reward-groups", "--threads", "1",
        "--temperature", "1.0",
    ]  # fmt: skip
    return cmd + (["--resume"] if resume else [])


def _config_file(model_dir, run_dir, path):
    """The settings of :func:`_cmd` as a TOML file: flat keys, a heading (``[rollouts]``) and
    the tables of the config's parts."""
    path.write_text(
        f'run_dir = "{run_dir}"\nsteps = {STEPS}\ncheckpoint_every = 1\n'
        f"[rollouts]\nprompts_per_step = {PROMPTS}\ngroup_size = {GROUP}\nmax_tokens_per_turn = 6\n"
        "temperature = 1.0\n[data]\ntrain_prompts = 20\neval_prompts = 0\n"
        f'[model]\npath = "{model_dir}"\nbf16 = false\n'
        "[algorithm]\nskip_equal_reward_groups = false\n[run]\nthreads = 1\n"
    )
    return path


def _steps_in(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError):
            pass
    return out


def test_sigkill_then_resume(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    kill_after = random.Random().randint(2, STEPS - 2)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    config = _config_file(tiny_model_dir, run_dir, tmp_path / "run.toml")
    proc = subprocess.Popen(
        [sys.executable, "-m", "skyrl_gym", "train", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    try:
        while kill_after not in _steps_in(run_dir / "metrics.jsonl"):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "training did not reach the kill step in time"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    saved = json.loads((run_dir / "config.json").read_text())
    same_by_flags = config_from_flags(_cmd(tiny_model_dir, run_dir)[4:])  # the file says what the flags say
    assert saved == json.loads(json.dumps(same_by_flags.as_tables()))
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_gym", "train", "--run-dir", str(run_dir), "--resume"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"resumed from step_" in done.stderr
    resumed = json.loads((run_dir / "config.json").read_text())
    assert resumed == {**saved, "run": {**saved["run"], "resume": True}}

    # the step count continues and every step is logged exactly once
    train_steps = [
        json.loads(line)["step"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    assert train_steps == list(range(1, STEPS + 1))
    # the trajectory log has no duplicates and holds each step's group once
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    keys = [(t["step"], t["group_id"], t["sample_index"]) for t in trajs]
    assert len(keys) == len(set(keys)) == STEPS * PROMPTS * GROUP
    # no prompt was replayed or skipped: the prompts are exactly the sampler's sequence
    sampler = PromptSampler(
        load_items("calculator", "train", 20, seed=0), seed=0, stratify_by="shape"
    )  # the env's bundled_stratify_by
    expected = [r.prompt_id for _ in range(STEPS) for r in sampler.next(PROMPTS)]
    seen = [
        t["prompt_id"]
        for t in sorted(trajs, key=lambda t: (t["step"], t["group_id"]))
        if t["sample_index"] == 0
    ]
    assert seen == expected
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert (run_dir / "metrics.png").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000005", "step_000006"]


def test_fresh_run_refuses_to_overwrite_checkpoints(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
    out = subprocess.run(_cmd(tiny_model_dir, run_dir), capture_output=True, timeout=120)
    assert out.returncode == 1
    assert b"--resume" in out.stderr
