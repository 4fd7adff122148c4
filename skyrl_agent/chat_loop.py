"""Chat-level episodes: a :class:`~skyrl_agent.types.ChatModel` (a hosted model through
LiteLLM) against a ``skyrl_gym`` env, for evaluation, judges and simulated users.

The same budgets, deadlines, env threads and failure handling as
:func:`skyrl_agent.loop.run_episode`, but text only: the trajectory has no token ids
(``prompt_ids``/``response_ids`` empty, ``rollout_logprobs`` None) and is not for training.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any

from skyrl_agent._env_stages import EnvFailure, env_call, finish_episode, may_grade, setup_and_init
from skyrl_agent._thread_pool import LoopThreadPool
from skyrl_agent.loop import turn_seed
from skyrl_agent.types import ChatModel, EpisodeInfo, RolloutConfig, StopReason, Trajectory
from skyrl_gym.types import as_step_output

__all__ = ["run_chat_episode", "play_chat_episode"]


async def run_chat_episode(
    model: ChatModel,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    info: EpisodeInfo | None = None,
    executor: concurrent.futures.Executor | LoopThreadPool | None = None,
    close_env: bool = True,
    initial: tuple[Sequence[dict[str, Any]], dict[str, Any]] | None = None,
) -> Trajectory:
    """Play one episode at the chat level; never raises for env or model failures. ``initial``
    and the env's ``setup``/``grade`` hooks as in :func:`skyrl_agent.loop.run_episode`."""
    traj, env_busy = await play_chat_episode(
        model, env, prompt, config=config, info=info, executor=executor, initial=initial
    )
    return await finish_episode(
        env, traj, config=config, executor=executor, grade=may_grade(traj, env_busy), close=close_env
    )


async def play_chat_episode(
    model: ChatModel,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    info: EpisodeInfo | None = None,
    executor: concurrent.futures.Executor | LoopThreadPool | None = None,
    initial: tuple[Sequence[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[Trajectory, bool]:
    """The play stage of :func:`run_chat_episode` (no grading, metrics or closing); returns the
    trajectory and whether an env call was left running."""
    info = info or EpisodeInfo()
    deadline = time.monotonic() + config.episode_deadline_s
    messages: list[dict[str, Any]] = []
    turn_rewards: list[float] = []
    llm_s = env_s = 0.0
    stop, error = StopReason.MAX_TURNS, None
    t_turn = 0.0
    env_busy = False
    in_thread_call = False  # an env call runs in a thread (the episode deadline may abandon it)

    def call(fn: Any, *args: Any, what: str) -> Any:
        return env_call(
            fn,
            *args,
            executor=executor,
            timeout_s=config.env_step_timeout_s,
            deadline=deadline,
            what=what,
            inline=config.env_calls == "inline",
        )

    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + config.episode_deadline_s):
            if initial is None:
                in_thread_call = True
                (first, _), dt = await setup_and_init(
                    env, prompt, config=config, executor=executor, deadline=deadline
                )
                in_thread_call = False
                env_s += dt
            else:
                first, _ = initial
            messages = [dict(m) for m in first]
            for turn in range(config.max_turns):
                sampling = config.sampling.with_turn(config.max_tokens_per_turn, turn_seed(info.seed, turn))
                t_turn = time.monotonic()
                try:
                    text = await model.chat(messages, sampling)
                except Exception as exc:  # noqa: BLE001 - recorded, the episode is masked
                    stop, error = StopReason.POLICY_ERROR, f"{type(exc).__name__}: {exc}"
                    break
                finally:
                    llm_s += time.monotonic() - t_turn
                    t_turn = 0.0
                messages.append({"role": "assistant", "content": text})
                in_thread_call = config.env_calls != "inline"
                raw, dt = await call(env.step, text, what=f"env.step (turn {turn})")
                in_thread_call = False
                env_s += dt
                try:
                    step = as_step_output(raw)
                except TypeError as exc:
                    raise EnvFailure(StopReason.ENV_ERROR, f"TypeError: {exc} (in env.step)") from exc
                turn_rewards.append(float(step.reward))
                if step.done:
                    stop = StopReason.ENV_DONE
                    break
                if turn == config.max_turns - 1:
                    break
                messages += [dict(m) for m in step.observations]
    except TimeoutError:
        stop = StopReason.DEADLINE
        env_busy = in_thread_call
        if t_turn:
            llm_s += time.monotonic() - t_turn
    except EnvFailure as failure:
        stop, error = failure.stop, failure.error if failure.stop != StopReason.DEADLINE else None
        env_busy = failure.abandoned
    traj = Trajectory(
        prompt_ids=[],
        response_ids=[],
        loss_mask=[],
        rollout_logprobs=None,
        token_rewards=[],
        reward=sum(turn_rewards),
        stop_reason=stop,
        num_turns=sum(1 for m in messages if m.get("role") == "assistant"),
        turn_rewards=turn_rewards,
        llm_seconds=llm_s,
        env_seconds=env_s,
        error=error,
        masked=stop in (StopReason.ENV_ERROR, StopReason.POLICY_ERROR),
        prompt_id=info.prompt_id,
        group_id=info.group_id,
        sample_index=info.sample_index,
        env_id=info.env_id,
        messages=messages if config.keep_messages else [],
    )
    return traj, env_busy
