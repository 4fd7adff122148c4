"""Asynchronous rollouts: the next batches are generated while the trainer trains, with bounded staleness.

A background thread produces the batches of steps ``s = first .. last`` in order. The trainer's
*version* is the number of steps it has finished (it publishes it with :meth:`publish` after
every update, right after pushing the new weights to the sampler). Admission control: the batch
of step ``s`` may *start* only once ``version >= s - 1 - max_staleness``; until then the producer
waits. The batch records the version it started under, and is consumed when the trainer is at
version ``s - 1``, so its staleness ``(s - 1) - started_version`` is at most ``max_staleness``
(an invariant :meth:`get` checks). ``max_staleness = 1`` overlaps generating batch ``s + 1`` with
training on batch ``s``, as in one-step off-policy RL (Noukhovitch et al. 2024, "Asynchronous
RLHF"); weight updates land in the sampler between its generation calls, so a long episode may
switch weights mid-way (in-flight updates, as PipelineRL does). The trainer corrects for the
lag with truncated importance sampling against the sampler's logprobs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = ["RolloutBatch", "AsyncRollouts"]


@dataclass
class RolloutBatch:
    """One step's rollouts and where they came from."""

    step: int
    """The training step this batch is for."""
    trajectories: list[Any]
    """The episodes (``skyrl_agent.types.Trajectory``)."""
    sampler_state: dict[str, Any]
    """The prompt sampler's position right after this batch's prompts were drawn (checkpointed
    with the step that consumes the batch, so a resumed run neither repeats nor skips a prompt)."""
    policy_version: int
    """The trainer's version (steps finished) when generation of this batch started."""
    gen_seconds: float
    """Wall time of the generation."""
    sampling_rounds: int = 1
    """Rollout rounds it took (more than one with dynamic sampling)."""
    prompts_drawn: int = 0
    """Prompts drawn from the sampler over those rounds."""


class AsyncRollouts:
    """Produce the batches of ``range(first_step, last_step + 1)`` in a background thread.

    ``produce(step, version) -> RolloutBatch`` generates one step's batch with the current sampler
    weights. ``start_version`` is the trainer's version before ``first_step`` (``first_step - 1``).
    Every wait has a deadline (``timeout_s``), so a stuck producer or trainer raises instead of
    hanging."""

    def __init__(
        self,
        produce: Callable[[int, int], RolloutBatch],
        first_step: int,
        last_step: int,
        max_staleness: int,
        *,
        timeout_s: float = 3600.0,
    ) -> None:
        if max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0, got {max_staleness}")
        self._produce = produce
        self._first, self._last = first_step, last_step
        self.max_staleness = max_staleness
        self.timeout_s = timeout_s
        self._version = first_step - 1
        self._cond = threading.Condition()
        self._stop = False
        self._queue: queue.Queue[RolloutBatch | BaseException] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="skyrl-async-rollouts", daemon=True)
        self.waits = 0
        """How many times admission control made the producer wait."""

    def start(self) -> AsyncRollouts:
        """Start the producer thread."""
        self._thread.start()
        return self

    def publish(self, version: int) -> None:
        """The trainer finished ``version`` steps (and pushed those weights to the sampler)."""
        with self._cond:
            self._version = version
            self._cond.notify_all()

    def _admitted(self, step: int) -> bool:
        return self._version >= step - 1 - self.max_staleness

    def _run(self) -> None:
        try:
            for step in range(self._first, self._last + 1):
                with self._cond:
                    if not self._admitted(step) and not self._stop:
                        self.waits += 1
                    ok = self._cond.wait_for(lambda s=step: self._stop or self._admitted(s), self.timeout_s)
                    if self._stop:
                        return
                    if not ok:
                        raise TimeoutError(
                            f"async rollouts: step {step} waited {self.timeout_s}s for the trainer"
                        )
                    version = self._version
                self._queue.put(self._produce(step, version))
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer by get()
            self._queue.put(exc)

    def get(self, step: int) -> RolloutBatch:
        """The batch of ``step`` (blocks until it is ready); re-raises the producer's error."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                item = self._queue.get(timeout=min(5.0, max(0.01, deadline - time.monotonic())))
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("async rollouts: the producer thread ended without a batch") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"async rollouts: no batch for step {step} in {self.timeout_s}s"
                    ) from None
        if isinstance(item, BaseException):
            raise item
        if item.step != step:
            raise RuntimeError(f"async rollouts: expected the batch of step {step}, got step {item.step}")
        staleness = (step - 1) - item.policy_version
        if staleness > self.max_staleness:  # cannot happen with the admission rule above
            raise RuntimeError(
                f"batch of step {step} is {staleness} versions stale (bound {self.max_staleness})"
            )
        return item

    def close(self, timeout_s: float = 600.0) -> None:
        """Stop producing (a batch in progress finishes) and join the thread. Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
