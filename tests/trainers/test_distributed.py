"""Data-parallel training on gloo with two real processes (torchrun), against one process."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skyrl_gym.errors import ConfigError
from tests.trainers.test_step import make_batch, tiny_lm
from trainers.config import TrainConfig
from trainers.distributed import SINGLE, init_distributed, resolve_device, shard_slice
from trainers.step import train_step

ROOT = Path(__file__).parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: list[str], timeout: float, nproc: int = 2) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args,
    ]  # fmt: skip
    # its own process group, so a timeout kills the workers too, not only the launcher
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"torchrun timed out after {timeout}s: {err.decode()[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_shards_cover_the_batch_once():
    for n in range(0, 9):
        for world in (1, 2, 3):
            parts = [list(range(n))[shard_slice(n, r, world)] for r in range(world)]
            assert sum(parts, []) == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_single_process_needs_no_process_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = init_distributed()
    assert ctx is SINGLE and not ctx.enabled and ctx.is_main
    assert ctx.all_gather_objects({"a": 1}) == [{"a": 1}]


@pytest.mark.parametrize(
    "mode",
    [
        "replicate",
        "fsdp",
        pytest.param(
            "nccl",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP2 on NCCL needs 2 GPUs"),
            ],
        ),
    ],
)
def test_two_gloo_ranks_equal_one_process_on_the_whole_batch(tmp_path, mode):
    """Replicated (gradient all-reduce) and FSDP2-sharded (the GPU path, on gloo) data parallelism."""
    done = _torchrun([str(ROOT / "tests/trainers/_dp_worker.py"), str(tmp_path), "2", mode], timeout=240)
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    rank0 = torch.load(tmp_path / "rank0.pt")
    rank1 = torch.load(tmp_path / "rank1.pt")
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["in_sync"] for r in reports)
    for name in rank0:  # the replicas are bit-for-bit equal
        assert torch.equal(rank0[name], rank1[name]), name

    torch.manual_seed(0)  # the same two steps in one process, on the whole batch
    model = tiny_lm()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cfg = TrainConfig(micro_batch_size=2, bf16=False, updates_per_step=2, grad_clip=0.5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run: another thread count sums in another order
    try:
        single = [train_step(model, opt, make_batch(seed=s), cfg).as_dict() for s in (1, 2)]
    finally:
        torch.set_num_threads(threads)
    moved = 0.0
    # The ranks sum gradients in another order (an all-reduce of two halves; FSDP2 a
    # reduce-scatter and full logits). AdamW's update is ~ lr * g / (|g| + eps), so float rounding
    # in a gradient that is itself near zero can move that one weight by up to ~lr * 1e-2 against
    # steps of ~4e-2 (seen once: a gate projection entry past 2e-6). A real data-parallel
    # bug (a missed all-reduce: each rank steps on its own half) moves nearly every entry, so: almost every
    # entry within `tight`, and none past 1% of the learning rate.
    tight = {"replicate": 2e-6, "fsdp": 2e-5, "nccl": 1e-4}[mode]
    for name, value in model.state_dict().items():
        diff = (rank0[name] - value).abs()
        off = float((diff > tight + 1e-5 * value.abs()).float().mean())
        assert off <= 1e-3 and float(diff.max()) <= 1e-4, (
            f"{name}: {off:.2%} off, max difference {float(diff.max()):.3g}"
        )
        moved = max(moved, float((value - start[name]).abs().max()))
    assert moved > 1e-3  # the steps did change the weights
    for ours, theirs in zip(reports[0]["stats"], single, strict=True):  # whole-batch stats on each rank
        for key in ("policy_loss", "grad_norm", "entropy", "clip_frac", "num_tokens"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    untimed = [
        [{k: v for k, v in st.items() if k not in ("seconds", "tokens_per_s")} for st in r["stats"]]
        for r in reports
    ]
    assert untimed[0] == untimed[1]


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [False, True])
def test_torchrun_trains_the_cli_with_two_ranks(tmp_path, fsdp):
    from skyrl_agent.models import tiny_random_model

    model_dir = tmp_path / "model"
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    run_dir = tmp_path / "run"
    args = [
        "-m", "trainers.cli", "train", "--model", str(model_dir), "--run-dir", str(run_dir),
        "--steps", "2", "--prompts-per-step", "3", "--group-size", "2", "--train-prompts", "12",
        "--eval-prompts", "4", "--eval-samples", "1", "--max-tokens-per-turn", "6",
        "--checkpoint-every", "1", "--no-bf16", "--no-skip-equal-reward-groups", "--temperature", "1.0",
        "--dist-backend", "gloo", "--fsdp" if fsdp else "--no-fsdp",
    ]  # fmt: skip
    done = _torchrun(args, timeout=400)
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    err = done.stderr.decode()
    assert ("2 ranks (gloo, FSDP2)" if fsdp else "2 ranks (gloo)") in err
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]  # rank 0 alone logs, once per step
    assert all(r["episodes"] == 3 * 2 for r in train)  # both ranks' rollouts were gathered
    evals = [r for r in records if r["kind"] == "eval"]
    assert [e["episodes"] + e["masked"] for e in evals] == [4, 4]
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert sorted({(t["step"], t["group_id"]) for t in trajs}) == [(s, g) for s in (1, 2) for g in range(3)]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answers")
def test_resolve_device_without_cuda():
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="--device cpu"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="choose"):
        resolve_device("tpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resolve_device_with_cuda():
    assert resolve_device("auto") == "cuda" and resolve_device("cuda") == "cuda"


def test_exit_rank_runs_exit_handlers_flushes_and_keeps_the_code(tmp_path):
    """A finished torchrun rank leaves by exit_rank: its atexit handlers (sandbox reapers, the
    engine's shutdown) still run, buffered output still arrives, and the exit code is kept."""
    marker = tmp_path / "handler-ran"
    script = (
        "import atexit, pathlib, sys\n"
        "from trainers.distributed import exit_rank\n"
        f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('yes'))\n"
        "sys.stdout.write('unflushed tail')\n"
        "exit_rank(3)\n"
        "print('never reached')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": ""},
    )  # fmt: skip
    assert done.returncode == 3, done.stderr.decode()
    assert done.stdout.decode() == "unflushed tail"
    assert marker.read_text() == "yes"
