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

from skyrl_agent.loop import EpisodeInfo, _env_call, _EnvFailure, _finish_env, turn_seed
from skyrl_agent.types import ChatModel, RolloutConfig, StopReason, Trajectory
from skyrl_gym.types import as_step_output

__all__ = ["run_chat_episode"]


async def run_chat_episode(
    model: ChatModel,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    info: EpisodeInfo | None = None,
    executor: concurrent.futures.Executor | None = None,
    close_env: bool = True,
) -> Trajectory:
    """Play one episode at the chat level; never raises for env or model failures."""
    info = info or EpisodeInfo()
    deadline = time.monotonic() + config.episode_deadline_s
    messages: list[dict[str, Any]] = []
    turn_rewards: list[float] = []
    llm_s = env_s = 0.0
    stop, error = StopReason.MAX_TURNS, None
    t_turn = 0.0

    def call(fn: Any, *args: Any, what: str) -> Any:
        return _env_call(
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
            (first, _), dt = await call(env.init, list(prompt), what="env.init")
            env_s += dt
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
                raw, dt = await call(env.step, text, what=f"env.step (turn {turn})")
                env_s += dt
                try:
                    step = as_step_output(raw)
                except TypeError as exc:
                    raise _EnvFailure(StopReason.ENV_ERROR, f"TypeError: {exc} (in env.step)") from exc
                turn_rewards.append(float(step.reward))
                if step.done:
                    stop = StopReason.ENV_DONE
                    break
                if turn == config.max_turns - 1:
                    break
                messages += [dict(m) for m in step.observations]
    except TimeoutError:
        stop = StopReason.DEADLINE
        if t_turn:
            llm_s += time.monotonic() - t_turn
    except _EnvFailure as failure:
        stop, error = failure.stop, failure.error if failure.stop != StopReason.DEADLINE else None
    finally:
        env_metrics = await _finish_env(env, executor, close=close_env)
    return Trajectory(
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
        env_metrics=env_metrics,
        error=error,
        masked=stop in (StopReason.ENV_ERROR, StopReason.POLICY_ERROR),
        prompt_id=info.prompt_id,
        group_id=info.group_id,
        sample_index=info.sample_index,
        env_id=info.env_id,
        messages=messages if config.keep_messages else [],
    )
