"""What the server remembers: sessions, training models, sampling sessions and snapshots, and
the jobs that change them.

The records live on the event loop's thread (routes read and add them); the model work runs on
the scheduler's single worker thread (see :mod:`integrations.tinker._futures`). A job captures the
records it needs when it is submitted, so a session closed meanwhile only frees memory after its
queued jobs have run.

With ``config.durable`` the records are also written to a database beside the checkpoints
(:mod:`integrations.tinker._store`), each training model's state to a hidden checkpoint after
every change, and a server started on the same checkpoint directory picks them up: sessions seen
within ``session_idle_timeout_s``, their models (rebuilt on the worker before any request runs),
their sampling sessions on disk weights, and finished results.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import shutil
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from integrations.tinker import _checkpoints, _ops
from integrations.tinker._auth import Tokens
from integrations.tinker._futures import _RECENT, Futures, JobLimits, Outcome, Scheduler
from integrations.tinker._models import (
    BaseModels,
    SamplerModels,
    Snapshot,
    TrainingModel,
    build_training_model,
)
from integrations.tinker._oai import OpenAISurface
from integrations.tinker._requests import (
    CreateModelBody,
    CreateSamplingSessionBody,
    LoadWeightsBody,
    OptimizerConfigBody,
    OptimStepBody,
    SampleBody,
    SaveWeightsBody,
    SaveWeightsForSamplerBody,
)
from integrations.tinker._store import LATEST, Store, StoredModel, StoredSession
from integrations.tinker._wire import FwdBwdRequest
from integrations.tinker.types import (
    _MODEL_ID,
    TINY_RANDOM_MODEL,
    CheckpointKind,
    LoraSpec,
    TinkerPath,
    TinkerRequestError,
    TinkerServerConfig,
    check_name,
)
from skyrl_agent.models import BUNDLED_MODEL

__all__ = ["Session", "ModelRecord", "SamplingSession", "ServerState"]

log = logging.getLogger(__name__)


@dataclass
class Session:
    """One client (``ServiceClient``)."""

    session_id: str
    sdk_version: str
    tags: list[str]
    last_seen: float = field(default_factory=time.monotonic)
    finished: bool = False
    model_ids: list[str] = field(default_factory=list)
    sampler_ids: list[str] = field(default_factory=list)
    stored_at: float = 0.0
    """When ``last_seen`` was last written to the store (monotonic; at most once a minute)."""
    user_metadata: dict[str, Any] | None = None
    """What the client sent with ``create_session`` (kept in memory only)."""
    display_name: str | None = None


@dataclass
class ModelRecord:
    """A training model as the routes see it; ``trained`` is set once its creation job ran."""

    model_id: str
    session_id: str
    base_model: str
    lora: LoraSpec | None
    trained: TrainingModel | None = None
    user_metadata: dict[str, str] | None = None
    """What the client passed as ``user_metadata`` when it created the model."""
    last_request: float = field(default_factory=time.time)
    """Wall time of the model's latest request (``training_runs``' ``last_request_time``)."""
    restored: StoredModel | None = None
    """Set when a restarted server read the model from its store (rebuilt on the worker)."""
    lost_gradients: bool = False
    """A restart lost gradients accumulated without an ``optim_step``: the next one fails."""


@dataclass
class SamplingSession:
    """Where a sampling session samples from."""

    sampling_session_id: str
    session_id: str
    snapshot: Snapshot


class ServerState:
    """Sessions, models and samplers, and the jobs that act on them."""

    def __init__(self, config: TinkerServerConfig) -> None:
        self.config = config
        self.store = (
            Store(config.checkpoint_dir, keep_results_s=config.result_ttl_s) if config.durable else None
        )
        self.futures = Futures(config.result_ttl_s, store=self.store)
        self.scheduler = Scheduler(self.futures, config.seq_gap_timeout_s, fair=config.fair_worker)
        # every model forward pass checks whether the running sampling job must stop
        self.base_models = BaseModels(config, on_forward=self.scheduler.checkpoint)
        self.samplers = SamplerModels(self.base_models, config)
        self.tokens = (
            Tokens.for_server(config.checkpoint_dir if config.durable else None, "local", config.jwt_ttl_s)
            if config.jwt_auth
            else None
        )
        """Mints and checks the JWTs clients trade their key for (None with ``jwt_auth`` off)."""
        self.openai = OpenAISurface(
            self.base_models,
            self.samplers,
            self.scheduler,
            self._path_snapshot,
            model_names=[BUNDLED_MODEL, TINY_RANDOM_MODEL, *(a for a, _ in config.model_aliases)],
            timeout_s=config.sample_timeout_s,
        )
        """The OpenAI-compatible routes' apps, one per model asked for (``/oai/api/v1``)."""
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, ModelRecord] = {}
        self.sampling_sessions: dict[str, SamplingSession] = {}
        self.requests: deque[tuple[str, str, int]] = deque(maxlen=2000)
        """The latest requests as ``(method, route, status)``, for debugging and the conformance test."""
        self.audit_log: deque[dict[str, Any]] = deque(maxlen=10_000)
        """Checkpoint events (``checkpoint_create``, ``_read``, ``_delete``, ``_ttl_set``), oldest
        first, as the client's ``AuditLogEntry`` (``GET /audit``; in memory, the latest 10,000)."""
        self._stored_samplers: dict[str, tuple[str, str]] = {}
        """Sampling sessions read from the store, built on first use: id -> (session id, source)."""
        if self.store is not None:
            self._restore(self.store)

    # ------------------------------------------------------------------ restarts
    def _restore(self, store: Store) -> None:
        """Take up what a previous server on this checkpoint directory left (see the module
        docstring); sessions idle for longer than ``session_idle_timeout_s`` are dropped."""
        now = time.time()
        for s in store.sessions():
            if now - s.last_seen > self.config.session_idle_timeout_s:
                self._forget_models(store.drop_session(s.session_id))
                continue
            self.sessions[s.session_id] = Session(s.session_id, s.sdk_version, list(s.tags))
        for m in store.models():
            session = self.sessions.get(m.session_id)
            if session is None or not m.durable:  # its session is gone, or it was never built
                store.drop_model(m.model_id)
                continue
            lora = LoraSpec(**m.lora) if m.lora else None
            record = ModelRecord(m.model_id, m.session_id, m.base_model, lora, user_metadata=m.user_metadata)
            record.restored = m
            self.models[m.model_id] = record
            session.model_ids.append(m.model_id)
            self.scheduler.open_model(m.model_id, m.next_seq, store.seq_requests(m.model_id))
            self.scheduler.run_detached(lambda record=record: self._rebuild(record), lane=m.model_id)
        for sid, session_id, source in store.samplers():
            if session_id in self.sessions:
                self._stored_samplers[sid] = (session_id, source)
                self.sessions[session_id].sampler_ids.append(sid)
        if self.sessions:
            log.info(
                "restored %d sessions and %d training models from %s",
                len(self.sessions),
                len(self.models),
                store.path,
            )

    def _rebuild(self, record: ModelRecord) -> None:
        """On the worker: a restored model from its latest durable state."""
        stored = record.restored
        assert stored is not None
        try:
            base = self.base_models.get(record.base_model)
            tm = build_training_model(record.model_id, base, record.lora, self.config)
            path = TinkerPath(record.model_id, CheckpointKind.STATE, LATEST)
            ckpt = _checkpoints.load(self.config.checkpoint_dir, path, with_optimizer=True)
            tm.load_trainable(ckpt.weights, str(path))
            if ckpt.optimizer is not None:
                tm.optimizer.load_state_dict(ckpt.optimizer)
            tm.steps = ckpt.steps
        except Exception as exc:  # noqa: BLE001 - its requests fail with this reason
            log.warning("training model %s could not be restored", record.model_id, exc_info=exc)
            record.restored = dataclasses.replace(stored, durable=False)
            return
        record.lost_gradients = stored.grad_pending
        record.trained = tm

    def _save_latest(self, record: ModelRecord, tm: TrainingModel) -> None:
        """On the worker, after the model's weights or optimizer state changed: its durable state."""
        if self.store is None:
            return
        _checkpoints.save(self.config.checkpoint_dir, tm, CheckpointKind.STATE, LATEST, overwrite=True)
        self.store.update_model(
            record.model_id,
            base_model=record.base_model,
            lora=record.lora.to_dict() if record.lora else None,
            steps=tm.steps,
            durable=True,
            grad_pending=False,
        )

    def _forget_models(self, model_ids: list[str]) -> None:
        """Delete the durable state of models whose session is finished."""
        root = Path(self.config.checkpoint_dir)
        for model_id in model_ids:
            if _MODEL_ID.fullmatch(model_id):
                shutil.rmtree(root / model_id / CheckpointKind.STATE.value / LATEST, ignore_errors=True)

    # ------------------------------------------------------------------ sessions
    def create_session(
        self,
        sdk_version: str,
        tags: list[str],
        user_metadata: dict[str, Any] | None = None,
        display_name: str | None = None,
    ) -> Session:
        """A new session (idle sessions are closed first)."""
        self.close_idle_sessions()
        session = Session(f"s{uuid.uuid4().hex[:16]}", sdk_version, list(tags))
        session.user_metadata, session.display_name = user_metadata, display_name
        self.sessions[session.session_id] = session
        if self.store is not None:
            self.store.add_session(StoredSession(session.session_id, sdk_version, list(tags)))
            session.stored_at = time.monotonic()
        return session

    def session(self, session_id: str) -> Session:
        """The open session ``session_id`` (its idle clock restarts)."""
        session = self.sessions.get(session_id)
        if session is None or session.finished:
            raise TinkerRequestError(
                f"unknown or finished session {session_id!r}: create a new ServiceClient", status=404
            )
        session.last_seen = time.monotonic()
        if self.store is not None and session.last_seen - session.stored_at > 60.0:
            self.store.touch_session(session_id)
            session.stored_at = session.last_seen
        return session

    def list_sessions(self, limit: int, offset: int) -> dict[str, Any]:
        """``GET /sessions``: the ids of the sessions this server knows, oldest first, one page."""
        return {"sessions": list(self.sessions)[offset : offset + limit]}

    def session_info(self, session_id: str) -> dict[str, Any]:
        """``GET /sessions/{session_id}``: its training runs and samplers (finished ones too)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise TinkerRequestError(f"unknown session {session_id!r}", status=404)
        return {
            "training_run_ids": list(session.model_ids),
            "sampler_ids": list(session.sampler_ids),
            "user_metadata": session.user_metadata,
            "display_name": session.display_name,
        }

    def finish_session(self, session_id: str) -> None:
        """Close a session and free its models and samplers (after their queued jobs). Idempotent."""
        session = self.sessions.get(session_id)
        if session is None or session.finished:
            return
        session.finished = True
        for model_id in session.model_ids:
            self.models.pop(model_id, None)
            self.scheduler.close_model(model_id)
        for sid in session.sampler_ids:
            self.sampling_sessions.pop(sid, None)
            self._stored_samplers.pop(sid, None)
        prefixes = tuple(f"mem:{m}/" for m in session.model_ids)
        # the sampling models are only touched on the worker: free them there, after queued jobs
        self.scheduler.run_detached(lambda: self.samplers.drop(lambda key: key.startswith(prefixes)))
        if self.store is not None:
            gone = self.store.drop_session(session_id)
            self.scheduler.run_detached(lambda: self._forget_models(gone))

    def close_idle_sessions(self) -> None:
        """Finish sessions with no heartbeat or request for ``session_idle_timeout_s``."""
        now = time.monotonic()
        for sid, s in list(self.sessions.items()):
            if not s.finished and now - s.last_seen > self.config.session_idle_timeout_s:
                self.finish_session(sid)
        for sid in [k for k, s in self.sessions.items() if s.finished and now - s.last_seen > 3600]:
            del self.sessions[sid]

    # ------------------------------------------------------------------ models
    def model(self, model_id: str) -> ModelRecord:
        """The training model ``model_id``."""
        record = self.models.get(model_id)
        if record is None:
            raise TinkerRequestError(f"unknown model_id {model_id!r} (was its session closed?)", status=404)
        self.session(record.session_id)
        return record

    def unload_model(self, model_id: str) -> None:
        """``unload_model``: forget a training model (its queued requests fail; its durable state
        is deleted, so a restart does not bring it back)."""
        record = self.model(model_id)
        self.models.pop(model_id, None)
        self.scheduler.close_model(model_id)
        session = self.sessions.get(record.session_id)
        if session is not None and model_id in session.model_ids:
            session.model_ids.remove(model_id)
        if self.store is not None:
            self.store.drop_model(model_id)
            self.scheduler.run_detached(lambda: self._forget_models([model_id]), lane=model_id)

    def _new_model(
        self,
        session_id: str,
        model_seq_id: int | None,
        base_model: str | None,
        lora: LoraSpec | None,
        user_metadata: dict[str, Any] | None = None,
    ) -> ModelRecord:
        session = self.session(session_id)
        if model_seq_id is None or model_seq_id < 0:
            raise TinkerRequestError(f"model_seq_id must be an integer >= 0, got {model_seq_id!r}")
        model_id = f"{session_id}:train:{model_seq_id}"  # the id the client derives itself
        if model_id in self.models:
            raise TinkerRequestError(f"model {model_id} already exists (model_seq_id {model_seq_id} reused)")
        record = ModelRecord(
            model_id, session_id, base_model or "", lora, user_metadata=_strings(user_metadata)
        )
        self.models[model_id] = record
        session.model_ids.append(model_id)
        self.scheduler.open_model(model_id)
        if self.store is not None:
            self.store.add_model(model_id, session_id, record.base_model, None, record.user_metadata)
        return record

    def submit_create_model(self, body: CreateModelBody) -> str:
        """``create_model``: a new training model (LoRA when ``lora_config`` is given, else full)."""
        lora = None
        if (cfg := body.lora_config) is not None:
            if cfg.rank > self.config.max_lora_rank:
                raise TinkerRequestError(
                    f"lora_config.rank {cfg.rank} is more than this server's max_lora_rank "
                    f"({self.config.max_lora_rank}); ask for a smaller rank"
                )
            lora = LoraSpec(
                rank=cfg.rank,
                alpha=self.config.lora_alpha,
                train_attn=cfg.train_attn,
                train_mlp=cfg.train_mlp,
                train_unembed=cfg.train_unembed,
                seed=cfg.seed,
            )
        _check_optimizer(body.optimizer_config)
        if not body.base_model:
            raise TinkerRequestError("create_model needs base_model")
        record = self._new_model(
            body.session_id, body.model_seq_id, body.base_model, lora, body.user_metadata
        )
        rid = self.futures.new("create_model")

        def job() -> Outcome:
            base = self.base_models.get(record.base_model)
            record.trained = build_training_model(record.model_id, base, record.lora, self.config)
            self._save_latest(record, record.trained)
            self._remember_run(record)
            return {"model_id": record.model_id, "type": "create_model"}

        self.scheduler.run(rid, self._guard(record, job), lane=record.model_id)
        return rid

    def _guard(self, record: ModelRecord, job: Any) -> Any:
        """``job`` that first drops the record when it fails to create its model."""

        def wrapped() -> Outcome:
            try:
                return job()
            except BaseException:
                if record.trained is None:
                    self.models.pop(record.model_id, None)
                    session = self.sessions.get(record.session_id)
                    if session is not None and record.model_id in session.model_ids:
                        session.model_ids.remove(record.model_id)  # no run of that id exists
                    if self.store is not None:
                        self.store.drop_model(record.model_id)
                raise

        return wrapped

    def info(self, model_id: str) -> dict[str, Any]:
        """``get_info``: what the client needs to know about a training model."""
        record = self.model(model_id)
        tm = record.trained
        if tm is None:
            raise TinkerRequestError(
                f"model {model_id} is still being created; wait for create_model", status=409
            )
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_data": {
                "arch": tm.base.arch,
                "model_name": tm.base.name,
                "tokenizer_id": tm.base.tokenizer_dir,
            },
            "is_lora": tm.lora is not None,
            "lora_rank": tm.lora.rank if tm.lora else None,
            "model_name": tm.base.name,
            "optimizer_config": {"type": "adamw"},
        }

    def _ordered(self, kind: str, model_id: str, seq_id: int | None, work: Any) -> str:
        """Submit ``work(training_model)`` in ``model_id``'s ``seq_id`` order."""
        again = self.scheduler.request_for(model_id, seq_id)
        if again is not None:
            return again
        rid = self.futures.new(kind)
        try:
            record = self.model(model_id)
        except TinkerRequestError as exc:
            self.futures.finish(rid, error=exc)
            return rid

        record.last_request = time.time()
        # where this request's place in the model's seq_id order is kept across restarts
        ordered_store = self.store if seq_id is not None and seq_id > 0 else None

        def job() -> Outcome:
            try:
                if record.trained is None and record.restored is not None:
                    raise TinkerRequestError(
                        f"model {model_id} could not be restored after the server restarted (see the server's "
                        "log); load a checkpoint into a new model"
                    )
                if record.trained is None:
                    raise TinkerRequestError(f"model {model_id} failed to be created; create a new one")
                return work(record.trained)
            finally:
                if ordered_store is not None:
                    ordered_store.update_model(model_id, next_seq=seq_id + 1)

        self.scheduler.submit(model_id, seq_id, rid, job)
        if ordered_store is not None and self.scheduler.request_for(model_id, seq_id) == rid:
            ordered_store.add_seq_request(model_id, seq_id, rid, _RECENT)
        return rid

    def submit_forward_backward(self, req: FwdBwdRequest) -> str:
        """``forward_backward`` (or a forward pass when ``forward_only``)."""
        micro = self.config.micro_batch_size
        store = self.store

        def work(tm: TrainingModel) -> Outcome:
            out = _ops.forward_backward(tm, req, micro, between=self.scheduler.interleave)
            if store is not None and not req.forward_only:
                store.update_model(tm.model_id, grad_pending=True)
            return out

        return self._ordered(
            "forward" if req.forward_only else "forward_backward", req.model_id, req.seq_id, work
        )

    def submit_optim_step(self, body: OptimStepBody) -> str:
        """``optim_step`` with Adam parameters."""
        if body.adam_params is None:
            kind = body.optimizer_params.type if body.optimizer_params else "unknown"
            exc = TinkerRequestError(
                f"optimizer {kind!r} is not supported by this server; use AdamParams (AdamW)"
            )
            return self.futures.failed("optim_step", exc)
        adam = body.adam_params.model_dump()
        record = self.models.get(body.model_id)

        def work(tm: TrainingModel) -> Outcome:
            if record is not None and record.lost_gradients:
                record.lost_gradients = False
                tm.optimizer.zero_grad(set_to_none=True)
                raise TinkerRequestError(
                    f"the server restarted after a forward_backward of model {tm.model_id} and before this "
                    "optim_step, so the gradients it accumulated are lost: run forward_backward again, then "
                    "optim_step (the weights are those of the last optim_step before the restart)"
                )
            out = _ops.optim_step(tm, adam)
            if record is not None:
                self._save_latest(record, tm)
            return out

        return self._ordered("optim_step", body.model_id, body.seq_id, work)

    def submit_save_state(self, body: SaveWeightsBody) -> str:
        """``save_weights`` (the client's ``save_state``): weights and optimizer state."""
        root, overwrite = self.config.checkpoint_dir, body.overwrite
        name = body.path or f"step-{uuid.uuid4().hex[:8]}"

        meta = _strings(body.user_metadata)

        def work(tm: TrainingModel) -> Outcome:
            path = _checkpoints.save(root, tm, CheckpointKind.STATE, check_name(name), overwrite, meta)
            self._audit("checkpoint_create", path, checkpoint_type="training")
            return {"path": str(path), "type": "save_weights"}

        return self._ordered("save_weights", body.model_id, body.seq_id, work)

    def submit_save_for_sampler(self, body: SaveWeightsForSamplerBody) -> str:
        """``save_weights_for_sampler``: named (a ``tinker://`` path on disk) or unnamed (a snapshot in
        memory and a sampling session on it, for ``save_weights_and_get_sampling_client``)."""
        name = body.path
        model_id = body.model_id
        if name is not None:
            root = self.config.checkpoint_dir
            overwrite = True  # the client has no overwrite flag here; a name is saved again on reuse

            meta = _strings(body.user_metadata)

            def named(tm: TrainingModel) -> Outcome:
                path = _checkpoints.save(root, tm, CheckpointKind.SAMPLER, check_name(name), overwrite, meta)
                self._audit("checkpoint_create", path, checkpoint_type="sampler")
                return {"path": str(path), "type": "save_weights_for_sampler"}

            return self._ordered("save_weights_for_sampler", model_id, body.seq_id, named)
        sampling_id = f"{model_id}:sample:{uuid.uuid4().hex[:12]}"

        def unnamed(tm: TrainingModel) -> Outcome:
            key = f"mem:{tm.model_id}/{tm.steps}/{uuid.uuid4().hex[:8]}"
            snap = Snapshot(key, tm.base.name, tm.lora, tm.trainable_state())
            tm.snapshots[key] = snap
            while len(tm.snapshots) > self.config.max_snapshots_per_model:
                old_key, _ = tm.snapshots.popitem(last=False)
                self.samplers.drop(lambda k, old=old_key: k == old)
            record = self.models.get(model_id)
            session_id = record.session_id if record else ""
            # single dict assignments from the worker; the client samples only after this returns
            self.sampling_sessions[sampling_id] = SamplingSession(sampling_id, session_id, snap)
            if session_id in self.sessions:
                self.sessions[session_id].sampler_ids.append(sampling_id)
            return {"sampling_session_id": sampling_id, "type": "save_weights_for_sampler"}

        return self._ordered("save_weights_for_sampler", model_id, body.seq_id, unnamed)

    def submit_load_weights(self, body: LoadWeightsBody) -> str:
        """``load_weights``: create a model from a checkpoint (``session_id`` + ``model_seq_id``),
        or load one into an existing model (legacy ``load_state``: ``model_id`` + ``seq_id``)."""
        root = self.config.checkpoint_dir
        with_optimizer = body.optimizer
        path = TinkerPath.parse(body.path)  # the body's validation parsed it already
        if body.session_id is not None:
            rid = self.futures.new("load_weights")
            try:
                _check_optimizer(body.optimizer_config)
                record = self._new_model(
                    body.session_id, body.model_seq_id, body.base_model, None, body.user_metadata
                )
            except TinkerRequestError as exc:
                self.futures.finish(rid, error=exc)
                return rid

            def create() -> Outcome:
                ckpt = _checkpoints.load(root, path, with_optimizer)
                self._audit("checkpoint_read", path, purpose="load_weights")
                base = self.base_models.get(record.base_model or ckpt.base_model)
                record.base_model, record.lora = base.name, ckpt.lora
                tm = build_training_model(record.model_id, base, ckpt.lora, self.config)
                tm.load_trainable(ckpt.weights, str(path))
                if ckpt.optimizer is not None:
                    tm.optimizer.load_state_dict(ckpt.optimizer)
                    tm.steps = ckpt.steps
                record.trained = tm
                self._save_latest(record, tm)
                self._remember_run(record)
                return {"path": str(path), "model_id": record.model_id, "type": "load_weights"}

            self.scheduler.run(rid, self._guard(record, create), lane=record.model_id)
            return rid

        def into(tm: TrainingModel) -> Outcome:
            ckpt = _checkpoints.load(root, path, with_optimizer)
            self._audit("checkpoint_read", path, purpose="load_weights")
            if (ckpt.lora is None) != (tm.lora is None) or (ckpt.lora and not ckpt.lora.same_layout(tm.lora)):
                raise TinkerRequestError(
                    f"{path} was saved with LoRA config {ckpt.lora} but this model has {tm.lora}"
                )
            tm.load_trainable(ckpt.weights, str(path))
            if ckpt.optimizer is not None:
                tm.optimizer.load_state_dict(ckpt.optimizer)
                tm.steps = ckpt.steps
            if (record := self.models.get(tm.model_id)) is not None:
                self._save_latest(record, tm)
            return {"path": str(path), "model_id": tm.model_id, "type": "load_weights"}

        return self._ordered("load_weights", body.model_id or "", body.seq_id, into)

    # ------------------------------------------------------------------ training runs
    def _remember_run(self, record: ModelRecord) -> None:
        """``<checkpoint_dir>/<model_id>/run.json``: what ``training_runs`` reports about the model,
        kept beside its checkpoints so it outlives the model in memory (and the server)."""
        where = Path(self.config.checkpoint_dir) / record.model_id
        where.mkdir(parents=True, exist_ok=True)
        info = {
            "base_model": record.base_model,
            "lora_rank": record.lora.rank if record.lora else None,
            "user_metadata": record.user_metadata,
            "created": time.time(),
        }
        tmp = where / f".run.json.{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, where / "run.json")

    def _run_ids(self) -> list[str]:
        """Every training run: the models in memory and those with a ``run.json`` on disk."""
        root = Path(self.config.checkpoint_dir)
        on_disk = {p.parent.name for p in root.glob("*/run.json")} if root.is_dir() else set()
        return sorted(set(self.models) | on_disk)

    def _known_run(self, model_id: str) -> ModelRecord | None:
        """404 unless ``model_id`` is a training run (in memory, or with a ``run.json`` on disk);
        its record when in memory."""
        record = self.models.get(model_id)
        if not _MODEL_ID.fullmatch(model_id) or (
            record is None and not (Path(self.config.checkpoint_dir) / model_id / "run.json").is_file()
        ):
            raise TinkerRequestError(f"unknown training run {model_id!r}", status=404)
        return record

    def training_run(self, model_id: str) -> dict[str, Any]:
        """The client's ``TrainingRun`` for ``model_id`` (``GET /training_runs/{model_id}``)."""
        record = self._known_run(model_id)
        if record is not None:
            base, rank, meta, last = (
                record.base_model,
                (record.lora.rank if record.lora else None),
                record.user_metadata,
                record.last_request,
            )
        else:
            info = json.loads((Path(self.config.checkpoint_dir) / model_id / "run.json").read_text())
            base, rank, meta = info["base_model"], info.get("lora_rank"), info.get("user_metadata")
            last = float(info.get("created", 0.0))
        checkpoints = _checkpoints.listing(self.config.checkpoint_dir, model_id)
        if checkpoints:
            last = max(last, max(datetime.datetime.fromisoformat(c["time"]).timestamp() for c in checkpoints))
        latest = {
            t: next((c for c in reversed(checkpoints) if c["checkpoint_type"] == t), None)
            for t in ("training", "sampler")
        }
        return {
            "training_run_id": model_id,
            "base_model": base,
            "model_owner": self.config.owner,
            "is_lora": rank is not None,
            "corrupted": False,
            "lora_rank": rank,
            "last_request_time": datetime.datetime.fromtimestamp(last, datetime.UTC).isoformat(),
            "last_checkpoint": latest["training"],
            "last_sampler_checkpoint": latest["sampler"],
            "user_metadata": meta,
        }

    def training_runs(self, limit: int, offset: int) -> dict[str, Any]:
        """``GET /training_runs``: the runs, newest request first, one page."""
        runs = sorted(
            (self.training_run(i) for i in self._run_ids()),
            key=lambda r: r["last_request_time"],
            reverse=True,
        )
        return {
            "training_runs": runs[offset : offset + limit],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)},
        }

    def checkpoints(
        self, model_id: str | None = None, limit: int | None = None, offset: int = 0
    ) -> dict[str, Any]:
        """``GET /training_runs/{model_id}/checkpoints`` (one run's, unpaginated) or
        ``GET /checkpoints`` (every run's, newest first, one page)."""
        if model_id is not None:
            self._known_run(model_id)  # 404 for an unknown run
            return {"checkpoints": _checkpoints.listing(self.config.checkpoint_dir, model_id), "cursor": None}
        every = [c for i in self._run_ids() for c in _checkpoints.listing(self.config.checkpoint_dir, i)]
        every.sort(key=lambda c: c["time"], reverse=True)
        n = limit if limit is not None else len(every)
        return {
            "checkpoints": every[offset : offset + n],
            "cursor": {"offset": offset, "limit": n, "total_count": len(every)},
        }

    def _audit(self, event: str, path: TinkerPath, **details: Any) -> None:
        details = {"model_id": path.model_id, "tinker_path": str(path), **details}
        self.audit_log.append(
            {
                "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
                "event": event,
                "event_details": details,
                "model_id": path.model_id,
                "tinker_path": str(path),
                "purpose": details.get("purpose"),
            }
        )

    def audit(self, event_type: str = "all", day: datetime.date | None = None) -> dict[str, Any]:
        """``GET /audit``: checkpoint events (the only kind this server has: projects, teams and
        organizations have none), of one UTC day when ``day`` is given."""
        entries = [
            e
            for e in self.audit_log
            if event_type in ("all", "checkpoints")
            and (day is None or datetime.datetime.fromisoformat(e["timestamp"]).date() == day)
        ]
        return {"entries": entries}

    def _checkpoint_path(self, model_id: str, checkpoint_id: str) -> TinkerPath:
        """The checkpoint ``checkpoint_id`` (``weights/<name>`` or ``sampler_weights/<name>``) of
        run ``model_id``; 404 for an unknown run, 400 for a malformed id."""
        self._known_run(model_id)
        return TinkerPath.parse(f"tinker://{model_id}/{checkpoint_id}")

    def delete_checkpoint(self, model_id: str, checkpoint_id: str) -> None:
        """``DELETE /training_runs/{model_id}/checkpoints/{checkpoint_id}``."""
        path = self._checkpoint_path(model_id, checkpoint_id)
        _checkpoints.remove(self.config.checkpoint_dir, path)
        self._audit("checkpoint_delete", path)

    def set_checkpoint_ttl(self, model_id: str, checkpoint_id: str, ttl_seconds: int | None) -> None:
        """``PUT /training_runs/{model_id}/checkpoints/{checkpoint_id}/ttl``."""
        path = self._checkpoint_path(model_id, checkpoint_id)
        _checkpoints.set_ttl(self.config.checkpoint_dir, path, ttl_seconds)
        self._audit("checkpoint_ttl_set", path, ttl_seconds=ttl_seconds)

    def weights_info(self, tinker_path: str) -> dict[str, Any]:
        """``POST /weights_info``: base model and LoRA layout of a checkpoint."""
        path = TinkerPath.parse(tinker_path)
        self._known_run(path.model_id)
        info = _checkpoints.weights_info(self.config.checkpoint_dir, path)
        self._audit("checkpoint_read", path, purpose="weights_info")
        return info

    # ------------------------------------------------------------------ sampling
    def create_sampling_session(self, body: CreateSamplingSessionBody) -> str:
        """``create_sampling_session`` on a base model or a ``tinker://`` checkpoint."""
        session = self.session(body.session_id)
        if body.model_path:
            snap = self._path_snapshot(body.model_path)
        elif body.base_model:
            snap = Snapshot.of_base(body.base_model)
        else:
            raise TinkerRequestError("create_sampling_session needs base_model or model_path")
        sid = f"{session.session_id}:sample:{uuid.uuid4().hex[:12]}"
        self.sampling_sessions[sid] = SamplingSession(sid, session.session_id, snap)
        session.sampler_ids.append(sid)
        if self.store is not None:
            self.store.add_sampler(sid, session.session_id, body.model_path or f"base:{body.base_model}")
        return sid

    def _path_snapshot(self, model_path: str) -> Snapshot:
        """The weights saved at a ``tinker://`` path (either kind), read from disk."""
        path = TinkerPath.parse(model_path)
        ckpt = _checkpoints.load(self.config.checkpoint_dir, path, with_optimizer=False)
        self._audit("checkpoint_read", path, purpose="sample")
        key = f"path:{path}@{ckpt.version}"  # a name saved again is another snapshot
        return Snapshot(key, ckpt.base_model, ckpt.lora, ckpt.weights, str(path))

    def sampling_session(self, sid: str) -> SamplingSession:
        """The sampling session ``sid``."""
        found = self.sampling_sessions.get(sid)
        if found is None and sid in self._stored_samplers:  # made before a restart
            session_id, source = self._stored_samplers.pop(sid)
            if source.startswith("base:"):
                snap = Snapshot.of_base(source[len("base:") :])
            else:
                snap = self._path_snapshot(source)
            found = self.sampling_sessions[sid] = SamplingSession(sid, session_id, snap)
        if found is None:
            raise TinkerRequestError(
                f"unknown sampling_session_id {sid!r} (was its session closed?)", status=404
            )
        return found

    def check_num_samples(self, body: SampleBody) -> None:
        """Refuse more samples than ``max_num_samples`` (before any sequence id is handed out)."""
        if body.num_samples > self.config.max_num_samples:
            raise TinkerRequestError(
                f"num_samples {body.num_samples} is more than this server's max_num_samples "
                f"({self.config.max_num_samples}); ask for fewer per request"
            )

    def submit_sample(self, body: SampleBody) -> tuple[str, list[str]]:
        """``asample``: the request id and one sequence id per sample. The job stops when it runs
        longer than ``sample_timeout_s``, when nobody polls its future, or when its session closes."""
        self.check_num_samples(body)
        _ops.check_sample_request(body, self.config)
        session_id = None
        if body.sampling_session_id:
            found = self.sampling_session(body.sampling_session_id)
            snap, session_id = found.snapshot, found.session_id
        elif body.model_path:
            snap = self._path_snapshot(body.model_path)
        elif body.base_model:
            snap = Snapshot.of_base(body.base_model)
        else:
            raise TinkerRequestError("asample needs sampling_session_id, model_path or base_model")
        if snap.key.startswith("mem:") and not self._snapshot_alive(snap):
            raise TinkerRequestError(
                "this sampling client's weights were dropped (more than max_snapshots_per_model newer "
                "snapshots, or its model was closed); call save_weights_and_get_sampling_client again"
            )
        rid = self.futures.new("sample")
        ids = [f"{rid}:{i}" for i in range(body.num_samples)]
        config = self.config

        def job() -> Outcome:
            policy = self.samplers.policy(snap)  # may load and build a model: not timed
            self.scheduler.restart_clock()
            return _ops.sample(policy, body, config, self.scheduler.checkpoint)

        def alive() -> bool:  # a sampling session lives as long as its client's session
            if session_id is None:
                return True
            session = self.sessions.get(session_id)
            return session is not None and not session.finished

        limits = JobLimits(config.sample_timeout_s, config.abandoned_after_s, alive)
        # one lane per sampling session (or per path or base model sampled without one)
        lane = f"sample:{body.sampling_session_id or snap.key}"
        self.scheduler.run(rid, job, limits, lane=lane)
        return rid, ids

    def _snapshot_alive(self, snap: Snapshot) -> bool:
        model_id = snap.key[len("mem:") :].split("/", 1)[0]
        record = self.models.get(model_id)
        return record is not None and record.trained is not None and snap.key in record.trained.snapshots

    def close(self) -> None:
        """Stop the worker and free the sampling models. Idempotent."""
        self.scheduler.shutdown()
        self.openai.close()
        self.samplers.close()
        if self.store is not None:
            self.store.close()


def _strings(meta: dict[str, Any] | None) -> dict[str, str] | None:
    """``user_metadata`` as the client's ``dict[str, str]`` (other values as JSON text)."""
    if not meta:
        return None
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}


def _check_optimizer(cfg: OptimizerConfigBody | None) -> None:
    kind = cfg.type if cfg is not None else "adamw"
    if kind != "adamw":
        raise TinkerRequestError(f"optimizer {kind!r} is not supported by this server; use the default AdamW")
