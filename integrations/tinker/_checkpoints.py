"""``tinker://`` checkpoints on disk.

``tinker://{model_id}/{kind}/{name}`` lives in ``{checkpoint_dir}/{model_id}/{kind}/{name}/`` as
``weights.pt`` (the trained parameters by name: LoRA adapters only, or the full model),
``optimizer.pt`` (AdamW's state, ``weights`` kind only) and ``meta.json`` (base model, LoRA
config, steps). A checkpoint is written to a temporary directory and renamed into place, so a
half-written one is never found.

A ``tinker://`` path only ever names a directory inside ``checkpoint_dir``: its parts are plain
names (:meth:`~integrations.tinker.types.TinkerPath.parse`), and the directory it resolves to,
symlinks followed, must still be inside ``checkpoint_dir``. Errors name the ``tinker://`` path,
never a path on the host.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from integrations.tinker._models import TrainingModel
from integrations.tinker.types import CheckpointKind, LoraSpec, TinkerPath, TinkerRequestError

__all__ = [
    "StoredCheckpoint",
    "save",
    "load",
    "local_dir",
    "listing",
    "remove",
    "set_ttl",
    "weights_info",
    "TTL_RANGE",
]

#: What ``PUT .../ttl`` accepts, in seconds: one hour to ten years (the client's documented range).
TTL_RANGE = (3600, 10 * 365 * 24 * 3600)
_TTL_FILE = "ttl.json"

_FORMAT = "skyrl-tinker-checkpoint-1"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint read back from disk."""

    path: TinkerPath
    base_model: str
    lora: LoraSpec | None
    steps: int
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    version: int
    """When it was written (``meta.json``'s mtime in ns): tells an overwritten name apart."""


def local_dir(root: str | os.PathLike[str], path: TinkerPath) -> Path:
    """Where ``path`` is stored under ``root``; a request error (404) if that directory, with
    symlinks resolved, is not inside ``root``."""
    base = Path(root).resolve()
    where = (base / path.model_id / path.kind.value / path.name).resolve()
    if not where.is_relative_to(base) or where == base:  # a symlink inside leads out
        raise TinkerRequestError(
            f"checkpoint path {path} leads outside this server's checkpoint directory; use another name",
            status=404,
        )
    return where


def save(
    root: str | os.PathLike[str],
    tm: TrainingModel,
    kind: CheckpointKind,
    name: str,
    overwrite: bool,
    user_metadata: dict[str, str] | None = None,
) -> TinkerPath:
    """Write ``tm``'s trained parameters (and, for ``weights``, its optimizer state), with the
    client's ``user_metadata``."""
    path = TinkerPath(tm.model_id, kind, name)
    final = local_dir(root, path)
    if final.exists() and not overwrite:
        raise TinkerRequestError(
            f"checkpoint {path} already exists; pass overwrite=True or choose another name"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        torch.save(tm.trainable_state(), tmp / "weights.pt")
        if kind is CheckpointKind.STATE:
            torch.save(tm.optimizer.state_dict(), tmp / "optimizer.pt")
        meta = {
            "format": _FORMAT,
            "model_id": tm.model_id,
            "base_model": tm.base.name,
            "lora": tm.lora.to_dict() if tm.lora else None,
            "steps": tm.steps,
            "params": list(tm.params),
            "user_metadata": user_metadata,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def load(root: str | os.PathLike[str], path: TinkerPath, with_optimizer: bool) -> StoredCheckpoint:
    """Read the checkpoint at ``path``; the optimizer state only when asked (``weights`` kind)."""
    where = _existing(root, path)
    meta_file = where / "meta.json"
    try:
        meta = json.loads(meta_file.read_text())
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise TinkerRequestError(f"{path} is not a checkpoint of this server; save it again")
        optimizer = None
        if with_optimizer:
            opt_file = where / "optimizer.pt"
            if not opt_file.is_file():
                raise TinkerRequestError(
                    f"{path} holds no optimizer state (only save_state checkpoints do); load it without "
                    "the optimizer"
                )
            optimizer = torch.load(opt_file, map_location="cpu", weights_only=True)
        lora = LoraSpec(**meta["lora"]) if meta.get("lora") else None
        weights = torch.load(where / "weights.pt", map_location="cpu", weights_only=True)
        version = meta_file.stat().st_mtime_ns
        return StoredCheckpoint(
            path, str(meta["base_model"]), lora, int(meta.get("steps", 0)), weights, optimizer, version
        )
    except TinkerRequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint; the client sees no host path
        log.warning("checkpoint %s in %s cannot be read", path, where, exc_info=exc)
        raise TinkerRequestError(
            f"checkpoint {path} is damaged and cannot be read ({type(exc).__name__}); save it again"
        ) from None


def _expires_at(where: Path) -> datetime.datetime | None:
    try:
        value = json.loads((where / _TTL_FILE).read_text()).get("expires_at")
        return datetime.datetime.fromisoformat(value) if isinstance(value, str) else None
    except (OSError, ValueError, AttributeError, TypeError):  # none, or damaged: no expiry
        return None


def _expired(where: Path) -> bool:
    """True (and the checkpoint is deleted) when its TTL has passed: expiry is applied whenever
    the checkpoint is next looked at, so an expired one is never listed, loaded or described."""
    expires = _expires_at(where)
    if expires is None or expires > datetime.datetime.now(datetime.UTC):
        return False
    shutil.rmtree(where, ignore_errors=True)
    return True


def _existing(root: str | os.PathLike[str], path: TinkerPath) -> Path:
    """The directory of the checkpoint at ``path``; 404 when there is none (or it expired)."""
    where = local_dir(root, path)
    if not (where / "meta.json").is_file() or _expired(where):
        raise TinkerRequestError(f"no checkpoint at {path}", status=404)
    return where


def remove(root: str | os.PathLike[str], path: TinkerPath) -> None:
    """Delete the checkpoint at ``path`` (``DELETE /training_runs/{run}/checkpoints/{id}``);
    samplers already made from it keep their weights in memory."""
    shutil.rmtree(_existing(root, path))


def set_ttl(root: str | os.PathLike[str], path: TinkerPath, ttl_seconds: int | None) -> None:
    """Make the checkpoint at ``path`` expire ``ttl_seconds`` from now (None: never)."""
    where = _existing(root, path)
    if ttl_seconds is None:
        (where / _TTL_FILE).unlink(missing_ok=True)
        return
    lo, hi = TTL_RANGE
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or not lo <= ttl_seconds <= hi:
        raise TinkerRequestError(
            f"ttl_seconds must be a whole number from {lo} (one hour) to {hi} (ten years), or null to "
            f"remove the expiry; got {ttl_seconds!r}"
        )
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=ttl_seconds)
    tmp = where / f".{_TTL_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"expires_at": expires.isoformat()}))
    os.replace(tmp, where / _TTL_FILE)


def weights_info(root: str | os.PathLike[str], path: TinkerPath) -> dict[str, Any]:
    """What loading the checkpoint at ``path`` needs (``POST /weights_info``): its base model
    and, for LoRA weights, the rank and which layers carry adapters."""
    where = _existing(root, path)
    try:
        meta = json.loads((where / "meta.json").read_text())
        lora = meta.get("lora") or None
        base = str(meta["base_model"])
    except (ValueError, KeyError, AttributeError):
        raise TinkerRequestError(f"checkpoint {path} is damaged and cannot be read; save it again") from None
    return {
        "base_model": base,
        "is_lora": lora is not None,
        "lora_rank": lora["rank"] if lora else None,
        "train_unembed": lora.get("train_unembed") if lora else None,
        "train_mlp": lora.get("train_mlp") if lora else None,
        "train_attn": lora.get("train_attn") if lora else None,
    }


_TYPES = {CheckpointKind.STATE: "training", CheckpointKind.SAMPLER: "sampler"}


def listing(root: str | os.PathLike[str], model_id: str) -> list[dict[str, Any]]:
    """The checkpoints of ``model_id`` on disk, oldest first, as the client's ``Checkpoint``
    (``checkpoint_id`` ``weights/<name>`` or ``sampler_weights/<name>``, type, time, path, size,
    user metadata). ``model_id`` must be a plain id (the caller checks)."""
    base = Path(root).resolve() / model_id
    out: list[tuple[int, dict[str, Any]]] = []
    for kind, ctype in _TYPES.items():
        top = base / kind.value
        if not top.is_dir():
            continue
        for meta_file in list(top.rglob("meta.json")):  # a list: an expired one is deleted on the way
            where = meta_file.parent
            if any(part.startswith(".") for part in where.relative_to(top).parts):  # a write in progress
                continue
            if _expired(where):
                continue
            try:
                meta = json.loads(meta_file.read_text())
            except (OSError, ValueError):
                continue
            name = where.relative_to(top).as_posix()
            mtime = meta_file.stat().st_mtime_ns
            out.append(
                (
                    mtime,
                    {
                        "checkpoint_id": f"{kind.value}/{name}",
                        "checkpoint_type": ctype,
                        "time": datetime.datetime.fromtimestamp(mtime / 1e9, datetime.UTC).isoformat(),
                        "tinker_path": str(TinkerPath(model_id, kind, name)),
                        "size_bytes": sum(f.stat().st_size for f in where.iterdir() if f.is_file()),
                        "public": False,
                        "user_metadata": meta.get("user_metadata") or None,
                        "expires_at": (e.isoformat() if (e := _expires_at(where)) else None),
                    },
                )
            )
    return [c for _, c in sorted(out, key=lambda pair: pair[0])]
