"""Experiment trackers a run reports to (``RunConfig.report_to``), beside ``metrics.jsonl``.

- ``tensorboard``: event files in ``<run_dir>/tensorboard`` (``torch.utils.tensorboard``).
- ``wandb``: a Weights & Biases run (the ``wandb`` extra) with the config, every metric as
  ``kind/name`` at its step, and the metrics plot at the end. ``WANDB_MODE=offline`` keeps it on
  disk (``<run_dir>/wandb``; ``wandb sync`` uploads it later); ``WANDB_PROJECT`` names the
  project (default ``skyrl``).
- ``mlflow``: an MLflow run (the ``mlflow`` extra: ``mlflow-skinny`` with SQLAlchemy) with the
  config as parameters, the metrics and the plot as an artifact; ``MLFLOW_TRACKING_URI`` picks
  the server or store (default: SQLite, ``<run_dir>/mlflow.db``, artifacts in
  ``<run_dir>/mlartifacts``; MLflow 3 keeps its file store for old data only), and
  ``MLFLOW_EXPERIMENT_NAME`` the experiment (default ``skyrl``).

A resumed run (``--resume``) continues the same W&B and MLflow runs: their ids are kept in the
run directory (``trackers.json``). Only rank 0 reports.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from skyrl_gym.errors import ConfigError, require

__all__ = ["TRACKERS", "Tracker", "open_trackers"]

TRACKERS = ("tensorboard", "wandb", "mlflow")
"""The names ``report_to`` accepts."""


class Tracker(Protocol):
    """What the metrics logger hands every tracker."""

    def log(self, step: int, kind: str, values: Mapping[str, float]) -> None:
        """Numeric metrics of one record (``kind`` is ``train`` or ``eval``)."""
        ...

    def log_file(self, path: Path) -> None:
        """A file made at the end of the run (the metrics plot)."""
        ...

    def close(self) -> None:
        """Flush and finish the run."""
        ...


def numeric(values: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (booleans, strings and NaN left out)."""
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class _TensorBoard:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, kind: str, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(f"{kind}/{name}", value, step)
        self.writer.flush()

    def log_file(self, path: Path) -> None:  # TensorBoard has the curves already
        pass

    def close(self) -> None:
        self.writer.close()


class _Wandb:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], ids: dict[str, str]) -> None:
        self.wandb: Any = require("wandb", "wandb", "--report-to wandb")
        self.run = self.wandb.init(
            project=os.environ.get("WANDB_PROJECT", "skyrl"),
            name=run_dir.name,
            dir=str(run_dir),
            config=dict(config),
            id=ids.get("wandb"),
            resume="allow",
        )
        ids["wandb"] = self.run.id

    def log(self, step: int, kind: str, values: Mapping[str, float]) -> None:
        self.run.log({f"{kind}/{k}": v for k, v in values.items()}, step=step)

    def log_file(self, path: Path) -> None:
        self.run.log({path.stem: self.wandb.Image(str(path))})

    def close(self) -> None:
        self.run.finish()


class _Mlflow:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], ids: dict[str, str]) -> None:
        self.mlflow: Any = require("mlflow", "mlflow", "--report-to mlflow")
        local = not os.environ.get("MLFLOW_TRACKING_URI")
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
        self.client = self.mlflow.tracking.MlflowClient(tracking_uri=uri)
        if ids.get("mlflow"):
            self.run_id = ids["mlflow"]
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "skyrl")
            found = self.client.get_experiment_by_name(name)
            artifacts = (run_dir / "mlartifacts").resolve().as_uri() if local else None
            experiment = (
                found.experiment_id
                if found
                else self.client.create_experiment(name, artifact_location=artifacts)
            )
            self.run_id = self.client.create_run(experiment, run_name=run_dir.name).info.run_id
            for key, value in config.items():  # parameters are write-once: only for a new run
                self.client.log_param(
                    self.run_id, key, json.dumps(value) if not isinstance(value, str) else value
                )
        ids["mlflow"] = self.run_id

    def log(self, step: int, kind: str, values: Mapping[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(f"{kind}/{k}", v, now, step) for k, v in values.items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def log_file(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_trackers(
    report_to: Sequence[str], run_dir: str | os.PathLike, config: Mapping[str, Any]
) -> list[Tracker]:
    """Start the trackers named in ``report_to`` for the run in ``run_dir``; a missing package
    raises :class:`ConfigError` naming the extra to install."""
    unknown = [name for name in report_to if name not in TRACKERS]
    if unknown:
        raise ConfigError(f"unknown tracker(s) {unknown} in report_to; choose from {', '.join(TRACKERS)}")
    run_dir = Path(run_dir)
    ids_file = run_dir / "trackers.json"
    ids: dict[str, str] = json.loads(ids_file.read_text()) if ids_file.exists() else {}
    out: list[Tracker] = []
    for name in report_to:
        if name == "tensorboard":
            try:
                out.append(_TensorBoard(run_dir))
            except ImportError as exc:
                raise ConfigError(
                    "--report-to tensorboard needs the tensorboard package (the training extra)"
                ) from exc
        elif name == "wandb":
            out.append(_Wandb(run_dir, config, ids))
        else:
            out.append(_Mlflow(run_dir, config, ids))
    if ids:
        ids_file.write_text(json.dumps(ids))
    return out
