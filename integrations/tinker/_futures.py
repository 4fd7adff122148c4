"""Request futures and the one worker that runs every job.

Every training, save and sample call is two-phase: the submit route returns a ``request_id`` at
once and the client polls ``retrieve_future`` until the result is there. :class:`Futures` holds
the results (JSON dicts, protobuf bytes or errors) for re-polls until they expire.

All model work runs on one worker thread (one accelerator, one model call at a time).
:class:`Scheduler` hands a training model's requests over in ``seq_id`` order: the client sends
the chunks of one ``forward_backward`` concurrently, the first one last, so a request waits until
every request with a lower ``seq_id`` of its model has been handed over. A gap that stays open
longer than ``gap_timeout_s`` (a client that died mid-call) is skipped. Everything here except
the job bodies runs on the event loop's thread.

Many tenants share the worker fairly (:class:`_Worker`): each job goes to a *lane* (a training
model's requests, one sampling session's requests, the server's own housekeeping), lanes take
turns one job at a time, and a job keeps its lane's order. A long training job also lets the
others in: between its micro-batches (:meth:`Scheduler.interleave`) it runs the next job of each
other lane that is waiting, so a client's sampling request waits for one micro-batch of another
client's training request, not for all of it (``bench/bench_tinker_tenants.py``). With
``fair=False`` the worker is one first-in, first-out queue.

A sampling job carries :class:`JobLimits`, so it can never hold the worker for long: it is
dropped before it starts, or stopped at its next model forward pass (:meth:`Scheduler.checkpoint`,
a hook on every model), once it has run longer than its time limit, once nobody has polled its
future for a while (the client went away), once the client cancelled it (``cancel_future``), or
once its session closed. Its future then fails with a message that says why. Training jobs run
to completion once started (stopping one halfway would leave half a gradient); they are bounded
by their request's size, and a cancelled one that has not started is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from integrations.tinker.types import ErrorCategory, TinkerRequestError

__all__ = ["Futures", "Scheduler", "Outcome", "JobLimits", "JobStopped", "SERVER_LANE"]

log = logging.getLogger(__name__)

_RECENT = 256  # seq_ids remembered per model for re-sent requests

#: A job's result: a JSON-ready dict or protobuf bytes.
Outcome = dict[str, Any] | bytes


@dataclass
class _Entry:
    kind: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: Outcome | None = None
    error: TinkerRequestError | None = None
    finished_at: float = 0.0
    delivered_at: float | None = None
    cancelled: bool = False
    """Set by ``cancel_future``; the worker reads it."""
    polls: int = 0
    """``retrieve_future`` calls waiting on it now."""
    touched: float = field(default_factory=time.monotonic)
    """When it was submitted or a poll of it last began or ended."""


class JobStopped(TinkerRequestError):
    """A job the worker dropped or stopped (time limit, cancelled, abandoned, session closed)."""


@dataclass(frozen=True)
class JobLimits:
    """When the worker drops or stops a job."""

    run_timeout_s: float
    """Longest time it may run once started."""
    abandoned_after_s: float
    """It is abandoned when nobody has polled its future for this long."""
    alive: Callable[[], bool] = lambda: True
    """False once the job is no longer wanted (its session closed)."""


@dataclass
class _Running:
    rid: str
    entry: _Entry | None
    limits: JobLimits | None
    started: float
    thread: int = field(default_factory=threading.get_ident)

    def stop_reason(self) -> str | None:
        """Why this job must stop now, or None."""
        entry, limits = self.entry, self.limits
        if entry is not None and entry.cancelled:
            return f"{entry.kind} request {self.rid} was cancelled by the client"
        if limits is None or entry is None:
            return None
        now = time.monotonic()
        if now - self.started > limits.run_timeout_s:
            return (
                f"{entry.kind} request stopped after {limits.run_timeout_s:g} s, the server's time limit "
                "for one sampling request (sample_timeout_s); ask for fewer tokens (sampling_params.max_tokens) "
                "or fewer samples (num_samples) per request"
            )
        if entry.polls == 0 and now - entry.touched > limits.abandoned_after_s:
            return (
                f"{entry.kind} request {self.rid} was abandoned: nobody polled its future for "
                f"{limits.abandoned_after_s:g} s (abandoned_after_s); poll retrieve_future while it runs"
            )
        if not limits.alive():
            return f"{entry.kind} request {self.rid} was stopped: its session was closed"
        return None


class Futures:
    """Results by request id; created, finished and read on the event loop's thread.

    A result is kept ``ttl_s`` after it finished, or ``delivered_ttl_s`` after it was first
    handed out (a client re-polls only when an answer got lost), whichever comes first."""

    def __init__(self, ttl_s: float, delivered_ttl_s: float = 120.0, store: Any = None) -> None:
        self.ttl_s = ttl_s
        self.delivered_ttl_s = delivered_ttl_s
        self._entries: dict[str, _Entry] = {}
        self.store = store
        """A :class:`~integrations.tinker._store.Store` that keeps finished results across
        restarts, or None."""

    def new(self, kind: str) -> str:
        """A new pending request id (``kind`` names the request type, for messages)."""
        self._expire()
        rid = f"{kind}-{uuid.uuid4().hex}"
        self._entries[rid] = _Entry(kind)
        return rid

    def entry(self, rid: str) -> _Entry | None:
        """The entry of ``rid`` (for the worker's checks), or None."""
        return self._entries.get(rid)

    def cancel(self, rid: str) -> bool:
        """Ask the worker to drop or stop ``rid``'s job; False if ``rid`` is unknown."""
        entry = self._entries.get(rid)
        if entry is None:
            return False
        entry.cancelled = True
        return True

    def finish(self, rid: str, result: Outcome | None = None, error: BaseException | None = None) -> None:
        """Store a result or an error (a non-request error becomes a server error)."""
        entry = self._entries.get(rid)
        if entry is None or entry.done.is_set():
            return
        if error is not None:
            if not isinstance(error, TinkerRequestError):
                log.exception("%s request %s failed", entry.kind, rid, exc_info=error)
                error = TinkerRequestError(
                    f"{entry.kind} failed on the server: {type(error).__name__}: {error}",
                    ErrorCategory.SERVER,
                    500,
                )
            entry.error = error
        else:
            entry.result = result
        entry.finished_at = time.monotonic()
        entry.done.set()
        if self.store is not None:
            err = entry.error
            as_error = (
                None
                if err is None
                else {"message": err.message, "category": err.category.value, "status": err.status}
            )
            self.store.add_result(rid, entry.kind, entry.result, as_error)

    def failed(self, kind: str, error: TinkerRequestError) -> str:
        """A request id that is already failed with ``error``."""
        rid = self.new(kind)
        self.finish(rid, error=error)
        return rid

    async def wait(self, rid: str, timeout_s: float) -> _Entry | None:
        """The finished entry, waiting at most ``timeout_s``; None if still pending. Raises
        :class:`TinkerRequestError` for an unknown (or expired) id."""
        entry = self._entries.get(rid)
        if entry is None and self.store is not None and (kept := self.store.result(rid)) is not None:
            entry = self._entries[rid] = _kept_entry(*kept)  # finished before a restart
        if entry is None:
            raise TinkerRequestError(
                f"unknown request_id {rid!r}: it never existed here, its result expired, or the server "
                "restarted while it was running (send the request again)"
            )
        if not entry.done.is_set():
            entry.polls += 1
            entry.touched = time.monotonic()
            try:
                await asyncio.wait_for(entry.done.wait(), timeout_s)
            except TimeoutError:
                return None
            finally:
                entry.polls -= 1
                entry.touched = time.monotonic()
        if entry.delivered_at is None:
            entry.delivered_at = time.monotonic()
        return entry

    def pending(self) -> int:
        """How many requests have not finished."""
        return sum(1 for e in self._entries.values() if not e.done.is_set())

    def _expire(self) -> None:
        now = time.monotonic()
        stale = [
            k
            for k, e in self._entries.items()
            if e.done.is_set()
            and (
                now - e.finished_at > self.ttl_s
                or (e.delivered_at is not None and now - e.delivered_at > self.delivered_ttl_s)
            )
        ]
        for k in stale:
            del self._entries[k]


def _kept_entry(kind: str, result: Outcome | None, error: dict[str, Any] | None) -> _Entry:
    entry = _Entry(kind, result=result, finished_at=time.monotonic())
    if error is not None:
        entry.error = TinkerRequestError(
            error["message"], ErrorCategory(error["category"]), int(error["status"])
        )
    entry.done.set()
    return entry


@dataclass
class _Queue:
    next_seq: int = 1
    waiting: dict[int, tuple[str, Callable[[], Outcome]]] = field(default_factory=dict)
    blocked_since: float | None = None
    recent: OrderedDict[int, str] = field(default_factory=OrderedDict)
    """The request ids of the latest ``seq_id`` s, so a re-sent request gets its first answer."""


#: The lane of the server's own jobs (restoring models, freeing sampling models).
SERVER_LANE = "server"


class _Worker:
    """One daemon thread that runs jobs lane by lane: the lanes that have jobs take turns, one job
    each, in the order they first had work; within a lane, jobs run in the order they came
    (``fair=False``: one lane for everything)."""

    def __init__(self, fair: bool = True) -> None:
        self.fair = fair
        self._lanes: OrderedDict[str, deque[Callable[[], None]]] = OrderedDict()
        self._cond = threading.Condition()
        self._closed = False
        self._current: str | None = None
        self._nested = False
        self._thread = threading.Thread(target=self._loop, name="tinker-worker", daemon=True)
        self._thread.start()

    def submit(self, lane: str, fn: Callable[[], None]) -> None:
        """Queue ``fn`` (which handles its own errors) in ``lane``; dropped after :meth:`close`."""
        with self._cond:
            if self._closed:
                return
            self._lanes.setdefault(lane if self.fair else SERVER_LANE, deque()).append(fn)
            self._cond.notify()

    def _take(self, lane: str) -> Callable[[], None]:
        queue = self._lanes[lane]
        fn = queue.popleft()
        if queue:
            self._lanes.move_to_end(lane)  # its next job waits for the other lanes' turns
        else:
            del self._lanes[lane]
        return fn

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._lanes and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                lane = next(iter(self._lanes))
                fn = self._take(lane)
            self._current = lane
            try:
                fn()
            except BaseException:  # noqa: BLE001 - jobs report their own errors; keep the worker alive
                log.exception("a job on the worker raised")
            finally:
                self._current = None

    def interleave(self) -> int:
        """From inside a job on the worker: run the next waiting job of every other lane (not
        from inside an interleaved job, and a no-op on other threads). How many ran."""
        if threading.current_thread() is not self._thread or self._nested or not self.fair:
            return 0
        with self._cond:  # not the server's own jobs: they may free what the running job uses
            lanes = [lane for lane in self._lanes if lane not in (self._current, SERVER_LANE)]
        outer, ran = self._current, 0
        self._nested = True
        try:
            for lane in lanes:
                with self._cond:
                    if self._closed or lane not in self._lanes:
                        continue
                    fn = self._take(lane)
                self._current = lane
                fn()
                ran += 1
        finally:
            self._nested, self._current = False, outer
        return ran

    def close(self) -> None:
        """Drop queued jobs and let the thread end after the running one. Idempotent."""
        with self._cond:
            self._closed = True
            self._lanes.clear()
            self._cond.notify_all()


class Scheduler:
    """Runs jobs on one worker thread shared fairly by lanes; a model's jobs in ``seq_id`` order."""

    def __init__(self, futures: Futures, gap_timeout_s: float, *, fair: bool = True) -> None:
        self.futures = futures
        self.gap_timeout_s = gap_timeout_s
        self._worker = _Worker(fair)
        self._queues: dict[str, _Queue] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: _Running | None = None

    def open_model(self, model_id: str, next_seq: int = 1, recent: dict[int, str] | None = None) -> None:
        """Start ordering ``model_id``'s requests; its first request has ``seq_id`` ``next_seq``
        (1, or where a restarted server's model left off, with the request ids it gave out)."""
        queue = self._queues.setdefault(model_id, _Queue(next_seq=next_seq))
        queue.recent.update(sorted((recent or {}).items())[-_RECENT:])

    def close_model(self, model_id: str) -> None:
        """Stop ordering ``model_id``'s requests; waiting ones fail."""
        queue = self._queues.pop(model_id, None)
        for rid, _ in queue.waiting.values() if queue else ():
            self.futures.finish(rid, error=TinkerRequestError(f"model {model_id} was closed"))

    def request_for(self, model_id: str, seq_id: int | None) -> str | None:
        """The request id already given to ``model_id``'s ``seq_id`` (a client retrying a submit
        whose answer it lost), or None."""
        queue = self._queues.get(model_id)
        if queue is None or seq_id is None:
            return None
        return queue.recent.get(seq_id)

    def has_model(self, model_id: str) -> bool:
        """Whether ``model_id``'s requests are being ordered."""
        return model_id in self._queues

    def run(
        self,
        rid: str,
        job: Callable[[], Outcome],
        limits: JobLimits | None = None,
        *,
        lane: str = SERVER_LANE,
    ) -> None:
        """Hand ``job`` to the worker's ``lane`` now; its result or error finishes ``rid``. With
        ``limits``, the job is dropped or stopped as they say (see the module docstring)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        entry = self.futures.entry(rid)

        def body() -> None:
            running = _Running(rid, entry, limits, time.monotonic())
            outer = self._running  # set when this job runs interleaved inside another one
            try:
                if (reason := running.stop_reason()) is not None:
                    raise JobStopped(reason)
                self._running = running
                result = job()
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to the client
                loop.call_soon_threadsafe(self.futures.finish, rid, None, exc)
            else:
                loop.call_soon_threadsafe(self.futures.finish, rid, result, None)
            finally:
                self._running = outer

        self._worker.submit(lane, body)

    def interleave(self) -> None:
        """Called by a long job between its steps (micro-batches): the next waiting job of every
        other lane runs now (see the module docstring). A no-op off the worker thread."""
        self._worker.interleave()

    def restart_clock(self) -> None:
        """The running job's time limit counts from now (called once its model is loaded: a first
        use may load a model, which is not the request's fault). A no-op off the worker."""
        running = self._running
        if running is not None and running.thread == threading.get_ident():
            running.started = time.monotonic()

    def checkpoint(self) -> None:
        """Raise :class:`JobStopped` if the job running on the worker (this thread) has limits
        and must stop now. Called before every model forward pass; a no-op anywhere else."""
        running = self._running
        if running is None or running.limits is None or running.thread != threading.get_ident():
            return
        if (reason := running.stop_reason()) is not None:
            raise JobStopped(reason)

    def run_detached(self, job: Callable[[], None], lane: str = SERVER_LANE) -> None:
        """Run ``job`` on the worker after what is queued in ``lane``, with no request to report to."""

        def body() -> None:
            try:
                job()
            except BaseException:  # noqa: BLE001 - nothing waits for it; log and go on
                log.exception("background job failed")

        self._worker.submit(lane, body)

    def call(self, fn: Callable[[], Any], lane: str = SERVER_LANE) -> asyncio.Future[Any]:
        """Run ``fn`` on the worker after what is queued in ``lane``; its result (or exception)
        arrives in the returned future, for a caller on the event loop that awaits it directly
        (no request id, no stored result: the OpenAI-compatible routes). A future cancelled
        before the worker reaches ``fn`` skips it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def body() -> None:
            if future.cancelled():
                return
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        self._worker.submit(lane, body)
        return future

    def submit(self, model_id: str, seq_id: int | None, rid: str, job: Callable[[], Outcome]) -> None:
        """Run ``job`` after every request of ``model_id`` with a lower ``seq_id``. A request
        without a ``seq_id`` runs after those already handed over."""
        queue = self._queues.get(model_id)
        if queue is None:
            self.futures.finish(rid, error=TinkerRequestError(f"unknown model_id {model_id!r}"))
            return
        if seq_id is None or seq_id <= 0:
            self.run(rid, job, lane=model_id)
            return
        if seq_id < queue.next_seq or seq_id in queue.waiting:
            self.futures.finish(
                rid,
                error=TinkerRequestError(
                    f"seq_id {seq_id} of model {model_id} was already used (next expected: {queue.next_seq})"
                ),
            )
            return
        queue.waiting[seq_id] = (rid, job)
        queue.recent[seq_id] = rid
        while len(queue.recent) > _RECENT:
            queue.recent.popitem(last=False)
        self._pump(queue, model_id)

    def _pump(self, queue: _Queue, model_id: str) -> None:
        progressed = False
        while queue.next_seq in queue.waiting:
            rid, job = queue.waiting.pop(queue.next_seq)
            queue.next_seq += 1
            self.run(rid, job, lane=model_id)
            progressed = True
        if not queue.waiting:
            queue.blocked_since = None
        elif progressed or queue.blocked_since is None:
            queue.blocked_since = time.monotonic()

    def skip_stale_gaps(self) -> None:
        """Skip missing ``seq_id`` s that have blocked a model for longer than the gap timeout."""
        now = time.monotonic()
        for model_id, queue in self._queues.items():
            if (
                queue.waiting
                and queue.blocked_since is not None
                and now - queue.blocked_since > self.gap_timeout_s
            ):
                lowest = min(queue.waiting)
                log.warning(
                    "model %s: seq_id %d..%d never arrived within %.0fs; running seq_id %d",
                    model_id,
                    queue.next_seq,
                    lowest - 1,
                    self.gap_timeout_s,
                    lowest,
                )
                queue.next_seq = lowest
                queue.blocked_since = None
                self._pump(queue, model_id)

    def shutdown(self) -> None:
        """Stop the worker (running jobs finish; queued ones are dropped). Idempotent."""
        self._worker.close()
