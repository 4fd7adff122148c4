"""Env calls with deadlines, and the env-side stages of an episode around the play stage.

An episode is a pipeline of stages (see :mod:`skyrl_agent.engine`):

1. **set-up**: build the env, seed it, run its optional ``setup()`` hook (start a container...)
   and ``init(prompt)``; no generation slot is held;
2. **play**: the turns (:func:`skyrl_agent.loop.run_episode`), holding a generation slot;
3. **finish**: the optional ``grade()`` hook (a verifier), ``get_metrics()`` and ``close()``,
   after the generation slot is released.

Hooks are detected by override: an env class that does not override ``BaseTextEnv.setup`` or
``BaseTextEnv.grade`` (or a duck-typed env without them) costs no thread hop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_agent._thread_pool import LoopThreadPool, run_in
from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.types import RolloutConfig, StopReason, Trajectory

__all__ = ["EnvFailure", "env_call", "has_hook", "setup_and_init", "finish_episode", "may_grade"]


class EnvFailure(Exception):
    """An env call failed or passed a deadline (recorded in the trajectory, never raised out).

    ``failure`` is what went wrong (a :class:`~skyrl_agent.failures.Failure`), or, for the
    episode's own deadline (not a failure: the episode stops with ``deadline`` and is kept), a
    message."""

    def __init__(self, stop: StopReason, failure: Failure | str, *, abandoned: bool = False) -> None:
        super().__init__(str(failure))
        self.stop = stop
        self.failure: Failure | None = failure if isinstance(failure, Failure) else None
        self.error = str(failure)
        self.abandoned = abandoned
        """True when a call was left running in its thread (the env may still be busy)."""


def has_hook(env: Any, name: str) -> bool:
    """Whether ``env`` defines the optional hook ``name`` (``setup``/``grade``) beyond the no-op
    default of ``BaseTextEnv``."""
    from skyrl_gym.core import BaseTextEnv

    impl = getattr(type(env), name, None)
    return callable(impl) and impl is not getattr(BaseTextEnv, name, None)


async def env_call(
    fn: Callable[..., Any],
    *args: Any,
    executor: concurrent.futures.Executor | LoopThreadPool | None,
    timeout_s: float,
    deadline: float,
    what: str,
    stage: FailureStage,
    inline: bool = False,
) -> tuple[Any, float]:
    """Run a synchronous env call in a thread (or inline); returns (result, seconds).

    ``deadline`` is the episode's (``time.monotonic()`` clock; ``math.inf`` for none); a
    failure is recorded as one of ``stage``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise EnvFailure(StopReason.DEADLINE, f"episode deadline passed before {what}")
    limit = min(timeout_s, remaining)
    t0 = time.monotonic()
    try:
        if inline:  # on the event loop: no thread hop; the deadline is checked afterwards
            result = fn(*args)
            if time.monotonic() - t0 > limit:
                raise TimeoutError
        elif isinstance(executor, LoopThreadPool):  # the pool's own timer: no timer per call
            result = await executor.submit(fn, *args, timeout=limit)
        else:
            async with asyncio.timeout(limit):
                result = await run_in(executor, fn, *args)
    except TimeoutError:
        if remaining <= timeout_s:
            raise EnvFailure(
                StopReason.DEADLINE, f"episode deadline passed during {what}", abandoned=not inline
            ) from None
        raise EnvFailure(
            StopReason.ENV_ERROR,
            Failure.timeout(stage, f"{what} took longer than {timeout_s}s"),
            abandoned=not inline,
        ) from None
    except Exception as exc:  # noqa: BLE001 - an env failure is recorded, not raised
        raise EnvFailure(StopReason.ENV_ERROR, Failure.of(exc, stage, what)) from exc
    return result, time.monotonic() - t0


async def setup_and_init(
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    executor: concurrent.futures.Executor | LoopThreadPool | None,
    deadline: float = math.inf,
) -> tuple[tuple[list[dict[str, Any]], dict[str, Any]], float]:
    """Run ``env.setup()`` (when defined, deadline ``env_setup_timeout_s``) then
    ``env.init(prompt)`` (deadline ``env_step_timeout_s``); returns (init result, seconds).
    Raises :class:`EnvFailure`."""
    seconds = 0.0
    if has_hook(env, "setup"):
        _, dt = await env_call(
            env.setup,
            executor=executor,
            timeout_s=config.env_setup_timeout_s,
            deadline=deadline,
            what="env.setup",
            stage=FailureStage.SETUP,
        )
        seconds += dt
    first, dt = await env_call(
        env.init,
        list(prompt),
        executor=executor,
        timeout_s=config.env_step_timeout_s,
        deadline=deadline,
        what="env.init",
        stage=FailureStage.SETUP,
        inline=config.env_calls == "inline",
    )
    return first, seconds + dt


#: Episodes that ended this way are graded (the env is idle and the episode is not spoiled).
_GRADABLE = (
    StopReason.ENV_DONE,
    StopReason.ENV_LIMIT,
    StopReason.MAX_TURNS,
    StopReason.CONTEXT_LIMIT,
    StopReason.DEADLINE,
)


def may_grade(traj: Trajectory, env_busy: bool) -> bool:
    """Whether the finish stage runs ``env.grade()`` for ``traj``: it played at least one turn,
    it is not masked, and no env call was left running (a deadline inside ``env.step``)."""
    return traj.num_turns > 0 and not traj.masked and not env_busy and traj.stop_reason in _GRADABLE


def add_grade(traj: Trajectory, reward: float) -> None:
    """Add ``reward`` (from ``env.grade()``) to the last turn: its turn reward, its last token's
    reward and the total."""
    traj.grade_reward = reward
    if traj.turn_rewards:
        traj.turn_rewards[-1] += reward
    if traj.turns:
        traj.turns[-1].reward += reward
    if traj.turn_spans and traj.token_rewards:
        traj.token_rewards[traj.turn_spans[-1][1] - 1] += reward
    traj.reward += reward


async def finish_episode(
    env: Any,
    traj: Trajectory,
    *,
    config: RolloutConfig,
    executor: concurrent.futures.Executor | LoopThreadPool | None,
    grade: bool,
    close: bool = True,
) -> Trajectory:
    """The finish stage: ``env.grade()`` when ``grade`` and the env defines it (deadline
    ``env_grade_timeout_s``; a failure masks the episode), then ``get_metrics()`` and
    ``close()``. Updates and returns ``traj``."""
    if grade and has_hook(env, "grade"):
        try:
            value, dt = await env_call(
                env.grade,
                executor=executor,
                timeout_s=config.env_grade_timeout_s,
                deadline=math.inf,
                what="env.grade",
                stage=FailureStage.GRADE,
            )
            traj.env_seconds += dt
            if value is not None:
                reward = float(value)
                if not math.isfinite(reward):
                    raise EnvFailure(
                        StopReason.ENV_ERROR,
                        Failure(
                            FailureStage.GRADE,
                            "ValueError",
                            f"env.grade() returned {value!r}, not a finite reward",
                            retriable=False,
                        ),
                    )
                add_grade(traj, reward)
        except EnvFailure as failure:
            traj.stop_reason, traj.masked = StopReason.ENV_ERROR, True
            traj.set_failure(failure.failure or failure.error)
    traj.env_metrics, closing = await finish_env(env, executor, close=close)
    if closing is not None and traj.failure is None and traj.error is None:  # complete, so not masked
        traj.set_failure(closing)
    return traj


async def finish_env(
    env: Any, executor: concurrent.futures.Executor | LoopThreadPool | None, close: bool
) -> tuple[dict[str, Any], Failure | None]:
    """Read metrics and close the env in a thread: the metrics, and the failure to close it (a
    ``close`` failure, not retriable: the trajectory is already complete, so nothing is played
    again; also in the metrics as ``close_error``)."""

    def work() -> tuple[dict[str, Any], Failure | None]:
        metrics: dict[str, Any] = {}
        try:
            if hasattr(env, "get_metrics"):
                metrics = dict(env.get_metrics() or {})
        except Exception as exc:  # noqa: BLE001
            metrics = {"metrics_error": f"{type(exc).__name__}: {exc}"}
        if close:
            try:
                env.close()
            except Exception as exc:  # noqa: BLE001
                return _closing(
                    metrics, Failure(FailureStage.CLOSE, type(exc).__name__, str(exc), retriable=False)
                )
        return metrics, None

    try:
        return await asyncio.wait_for(run_in(executor, work), 60.0)
    except TimeoutError:
        late = Failure(
            FailureStage.CLOSE, "TimeoutError", "get_metrics/close took longer than 60s", retriable=False
        )
        return _closing({}, late)


def _closing(metrics: dict[str, Any], failure: Failure) -> tuple[dict[str, Any], Failure]:
    """``metrics`` with ``close_error`` (the failure's text), and the failure."""
    return {**metrics, "close_error": str(failure)}, failure
