"""README's first command, the main job (`bash scripts/train.sh`), run end to end at a tiny size:
set-up (already done: it skips what is there), the trainer's defaults with a tiny random model
and a handful of prompts, and the summary that the full-size run writes. The second command,
`bash scripts/test.sh`, is what `.ci/run` runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.docs._markdown import REPO


@pytest.mark.slow
def test_the_main_job_command_runs_at_a_tiny_size(tmp_path):
    model = tmp_path / "tiny-model"
    subprocess.run(
        [sys.executable, str(REPO / "examples" / "make_tiny_model.py"), str(model)], check=True, timeout=120
    )
    run_dir = tmp_path / "run"
    tiny = ["--model", str(model), "--steps", "1", "--train-prompts", "8", "--prompts-per-step", "2"]
    tiny += ["--group-size", "2", "--max-tokens-per-turn", "8", "--eval-prompts", "2", "--eval-samples", "1"]
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "train.sh"), *tiny, "--no-progress", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    for phase in ("baseline", "final"):
        assert set(summary[phase]) >= {"success", "success_se"}, summary
        assert 0.0 <= summary[phase]["success"] <= 1.0
    assert (run_dir / "metrics.png").is_file() and (run_dir / "metrics.jsonl").is_file()
