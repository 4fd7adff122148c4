"""tinker-cookbook 0.6.1's own recipes, run by their command lines as a cookbook user runs them,
against ``skyrl tinker serve`` (its own process) with a tiny model: the supervised chat recipe on
the cookbook's bundled conversations for two steps with its checkpoint, and the math RL recipe
with its default loss, which the server refuses by name. The math RL recipe training two steps
(its arithmetic env, ``loss_fn=importance_sampling``) and resuming from its checkpoint is the
executed section of docs/tutorials/08-tinker-api.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")
cookbook = pytest.importorskip(
    "tinker_cookbook", reason="tinker-cookbook is not installed (scripts/setup.sh)"
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_CONVERSATIONS = Path(cookbook.__file__).parent / "example_data" / "conversations.jsonl"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random model saved with its tokenizer: the cookbook loads the tokenizer by the base
    model's name, so the name is this directory (which the server also takes as a base model)."""
    from skyrl_agent.models import tiny_random_model

    out = tmp_path_factory.mktemp("tiny-model")
    model, tokenizer = tiny_random_model()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    args = [sys.executable, "-m", "integrations.tinker", "--port", "0", "--log-level", "warning"]
    args += ["--checkpoint-dir", str(tmp_path_factory.mktemp("tinker-ckpt"))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        for _ in range(200):
            line = proc.stdout.readline()
            if "tinker server at" in line or (not line and proc.poll() is not None):
                break
        assert "tinker server at" in line, line
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.kill()
        proc.wait(timeout=30)


def cookbook_run(module: str, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python -m <module> key=value ...`` (the cookbook's chz command line) in a scratch folder."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_API_KEY": "tml-cookbook-test", "NO_PROXY": "*"}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def metrics(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def final_checkpoint(log_path: Path) -> dict:
    rows = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    return next(r for r in rows if r.get("name") == "final")


def test_the_math_rl_recipe_with_its_default_loss_is_refused_by_name(server_url, tiny_model_dir, tmp_path):
    run = cookbook_run(
        "tinker_cookbook.recipes.math_rl.train",
        tmp_path,
        f"model_name={tiny_model_dir}",
        "renderer_name=role_colon",
        f"base_url={server_url}",
        "groups_per_batch=2",
        "group_size=2",
        "lora_rank=4",
        "max_steps=1",
        "eval_every=0",
        f"log_path={tmp_path / 'rl-default'}",
        "behavior_if_log_dir_exists=delete",
    )
    assert run.returncode != 0
    assert "record_stability_info (StableReinforce) is not supported" in run.stderr, run.stderr[-3000:]


def test_the_supervised_chat_recipe_trains_on_the_cookbook_example_data(server_url, tiny_model_dir, tmp_path):
    log = tmp_path / "sl"
    run = cookbook_run(
        "tinker_cookbook.recipes.chat_sl.train",
        tmp_path,
        f"model_name={tiny_model_dir}",
        "renderer_name=role_colon",
        f"base_url={server_url}",
        f"dataset={EXAMPLE_CONVERSATIONS}",
        "batch_size=8",
        "max_length=1024",
        "lora_rank=4",
        "max_steps=2",
        "eval_every=0",
        "save_every=1",
        f"log_path={log}",
        "behavior_if_log_dir_exists=delete",
    )
    assert run.returncode == 0, run.stderr[-4000:]
    steps = metrics(log)
    assert [m["step"] for m in steps] == [0, 1]
    assert all(m["num_sequences"] == 8 and 0 < m["train_mean_nll"] < 20 for m in steps), steps
    assert final_checkpoint(log)["state_path"].startswith("tinker://")
