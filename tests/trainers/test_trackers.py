"""W&B (offline) and MLflow (a local file store) as trackers of a real training run, read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig
from trainers.trackers import open_trackers

wandb = pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")


def test_report_to_takes_commas_spaces_and_none():
    assert TrainConfig(report_to=("tensorboard,wandb", "mlflow")).run.report_to == (
        "tensorboard",
        "wandb",
        "mlflow",
    )
    assert TrainConfig(report_to=("none",)).run.report_to == ()
    with pytest.raises(ConfigError, match="comet"):
        TrainConfig(report_to=("comet",))
    with pytest.raises(ConfigError, match="unknown tracker"):
        open_trackers(["comet"], ".", {})


@pytest.fixture
def offline_wandb(monkeypatch):
    for key, value in {
        "WANDB_MODE": "offline",  # nothing leaves the machine; the run stays in run_dir/wandb
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_PROJECT": "skyrl-test",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.mark.slow
def test_a_run_reports_to_wandb_and_mlflow_and_resumes_into_the_same_runs(tmp_path, offline_wandb):

    import skyrl_gym
    from skyrl_agent.models import tiny_random_model
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    run_dir = tmp_path / "run"
    cfg = TrainConfig(
        env="test-coin", model=str(tmp_path / "model"), run_dir=str(run_dir), steps=2, prompts_per_step=2,
        group_size=2, train_prompts=20, eval_prompts=2, eval_samples=1, max_turns=1, max_tokens_per_turn=3,
        stop=("e", "a"), skip_equal_reward_groups=False, bf16=False, temperature=1.0, progress=False,
        threads=1, checkpoint_every=1, report_to=("tensorboard", "wandb", "mlflow"),
    )  # fmt: skip
    skyrl_gym.register("test-coin", "tests.envs_for_tests:CoinEnv")
    try:
        train(cfg)
        ids = json.loads((run_dir / "trackers.json").read_text())
        train(cfg.replace(steps=3, resume=True))
    finally:
        skyrl_gym.deregister("test-coin")
    assert json.loads((run_dir / "trackers.json").read_text()) == ids  # the same runs continued
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last_train = [r for r in records if r["kind"] == "train"][-1]

    # MLflow: read its SQLite store back through its client
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
    history = client.get_metric_history(ids["mlflow"], "train/reward_mean")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert next(m.value for m in history if m.step == 3) == pytest.approx(last_train["reward_mean"])
    run = client.get_run(ids["mlflow"])
    assert run.data.params["env"] == "test-coin" and json.loads(run.data.params["steps"]) == 2
    assert "eval/success" in run.data.metrics
    assert any(a.path == "metrics.png" for a in client.list_artifacts(ids["mlflow"]))

    # W&B offline: each init wrote a transaction log (run-<id>.wandb) of the records it would upload
    logs = sorted(Path(run_dir / "wandb").glob(f"offline-run-*-{ids['wandb']}/run-{ids['wandb']}.wandb"))
    assert len(logs) == 2  # the first run and its resumption, one W&B run id
    history: dict[int, dict[str, object]] = {}
    config_keys: set[str] = set()
    for log in logs:
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item
                }
                history.setdefault(int(items.get("_step", -1)), {}).update(items)
            elif kind in ("run", "config"):  # the config comes with the run record, updates after
                config = record.run.config if kind == "run" else record.config
                config_keys |= {u.key for u in config.update}
    assert {"env", "steps", "report_to"} <= config_keys
    assert history[3]["train/reward_mean"] == pytest.approx(last_train["reward_mean"])
    assert {1, 2, 3} <= {step for step, items in history.items() if "train/reward_mean" in items}
    assert any("eval/success" in items for items in history.values())
    plots = [
        items["metrics/path"] for items in history.values() if items.get("metrics/_type") == "image-file"
    ]
    assert plots and (logs[-1].parent / "files" / plots[-1]).exists()  # the plot, as W&B media


def wandb_records(path: Path) -> list:
    """The protobuf records of a W&B transaction log: a 7-byte ``:W&B`` header, then LevelDB's
    log format (32 KiB blocks of chunks: crc32c, 2-byte little-endian length, type 1 full,
    2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    records, pending, pos, block = [], b"", 7, 32 * 1024
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records
