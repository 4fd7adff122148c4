"""The agent loop: one episode of a policy against a ``skyrl_gym`` text env.

::

    env.setup()                             # optional hook, in a worker thread
    messages = env.init(prompt)             # in a worker thread, with a deadline
    ids = render(messages)                  # once: prompt_ids
    repeat:
        turn = policy.generate(ids)         # token ids + logprobs, loss mask 1
        out = env.step(turn.text)           # in a worker thread, with a deadline
        reward -> the turn's last token
        if done or a budget is spent: stop
        ids += tokens of out.observations   # loss mask 0, never re-rendered
    reward += env.grade()                   # optional hook: added to the last turn's reward

Budgets: ``max_turns``, ``max_tokens_per_turn``, ``max_context_tokens`` (each turn's
``max_tokens`` is cut to what still fits) and ``episode_deadline_s``. The stop reason is recorded.

Failures: an exception from ``env.init``/``env.step`` or an env call past
``env_step_timeout_s`` is an infrastructure failure (or an env bug): the trajectory is returned
with ``masked=True``, ``stop_reason=env_error`` and the error text, never as reward 0. A policy
exception gives ``policy_error``, also masked; so does a ``grade()`` that raises or passes
``env_grade_timeout_s``. Env threads cannot be killed: a timed-out env
call is abandoned and its thread finishes on its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_agent._env_stages import EnvFailure as _EnvFailure
from skyrl_agent._env_stages import env_call as _env_call
from skyrl_agent._env_stages import finish_episode, may_grade, setup_and_init
from skyrl_agent._thread_pool import LoopThreadPool
from skyrl_agent.chat import ChatRenderer
from skyrl_agent.types import (
    EpisodeInfo,
    FinishReason,
    GenerateRequest,
    Policy,
    RolloutConfig,
    StopReason,
    Trajectory,
)
from skyrl_gym.types import as_step_output

__all__ = ["run_episode", "play_episode", "turn_seed", "EpisodeInfo", "split_steps"]


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of ``turn`` in an episode seeded ``episode_seed`` (stable across runs)."""
    return (episode_seed * 1_000_003 + turn * 7919 + 17) % (2**63)


async def run_episode(
    policy: Policy,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    renderer: ChatRenderer | None = None,
    info: EpisodeInfo | None = None,
    executor: concurrent.futures.Executor | LoopThreadPool | None = None,
    close_env: bool = True,
    initial: tuple[Sequence[dict[str, Any]], dict[str, Any]] | None = None,
) -> Trajectory:
    """Play one episode of ``policy`` in ``env`` (a ``BaseTextEnv``) and return its trajectory.

    ``renderer`` defaults to a :class:`ChatRenderer` of the policy's tokenizer. Env calls run in
    ``executor`` (a ``concurrent.futures`` executor or a ``LoopThreadPool``; default: the event
    loop's). The env's optional ``setup()`` hook runs before
    ``init`` and its optional ``grade()`` hook after the last turn (its reward is added to the
    last turn's). ``initial`` is the result of an ``env.init`` (and ``setup``) already run by
    the caller (the engine's set-up stage); then neither is called here. The env is closed at
    the end unless ``close_env=False``. Never raises for env or policy failures: they are
    recorded.
    """
    traj, env_busy = await play_episode(
        policy, env, prompt, config=config, renderer=renderer, info=info, executor=executor, initial=initial
    )
    return await finish_episode(
        env, traj, config=config, executor=executor, grade=may_grade(traj, env_busy), close=close_env
    )


async def play_episode(
    policy: Policy,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    renderer: ChatRenderer | None = None,
    info: EpisodeInfo | None = None,
    executor: concurrent.futures.Executor | LoopThreadPool | None = None,
    initial: tuple[Sequence[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[Trajectory, bool]:
    """The play stage of :func:`run_episode`: the turns, without grading, metrics or closing.

    Returns the trajectory and whether an env call was left running in its thread (then the
    env must not be graded)."""
    info = info or EpisodeInfo()
    renderer = renderer or ChatRenderer(policy.tokenizer)
    start = time.monotonic()
    deadline = start + config.episode_deadline_s
    prompt_ids: list[int] = []
    response_ids: list[int] = []
    loss_mask: list[int] = []
    logprobs: list[float] | None = []
    token_rewards: list[float] = []
    turn_rewards: list[float] = []
    turn_spans: list[tuple[int, int]] = []
    messages: list[dict[str, Any]] = []
    llm_s = env_s = 0.0
    truncated = 0
    stop = StopReason.MAX_TURNS
    error: str | None = None
    inline_open = False
    env_busy = False
    in_thread_call = False  # an env call runs in a thread (the episode deadline may abandon it)

    def call(fn: Callable[..., Any], *args: Any, what: str) -> Any:
        return _env_call(
            fn,
            *args,
            executor=executor,
            timeout_s=config.env_step_timeout_s,
            deadline=deadline,
            what=what,
            inline=config.env_calls == "inline",
        )

    t_turn = 0.0  # when the policy call in flight (if any) started
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + config.episode_deadline_s):
            if initial is None:
                in_thread_call = True
                (first, _init_info), dt = await setup_and_init(
                    env, prompt, config=config, executor=executor, deadline=deadline
                )
                in_thread_call = False
                env_s += dt
            else:
                first, _init_info = initial
            tools = None
            if hasattr(env, "tool_specs"):
                tools = env.tool_specs() or None
            prompt_ids = renderer.encode_prompt(first, tools)
            if config.keep_messages:
                messages = [dict(m) for m in first]
            if len(prompt_ids) >= config.max_context_tokens:
                stop = StopReason.CONTEXT_LIMIT
            for turn in range(config.max_turns if stop != StopReason.CONTEXT_LIMIT else 0):
                room = config.max_context_tokens - len(prompt_ids) - len(response_ids)
                if room <= 0:
                    stop = StopReason.CONTEXT_LIMIT
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stop = StopReason.DEADLINE
                    break
                sampling = config.sampling.with_turn(
                    min(config.max_tokens_per_turn, room), turn_seed(info.seed, turn)
                )
                request = GenerateRequest(
                    prompt_ids + response_ids, sampling, f"{info.prompt_id}/{info.sample_index}/{turn}"
                )
                t0 = t_turn = time.monotonic()
                try:
                    # the episode-wide timeout (above) cancels this await when the deadline passes
                    out = (await policy.generate([request]))[0]
                except Exception as exc:  # noqa: BLE001 - recorded, the episode is masked
                    llm_s += time.monotonic() - t0
                    stop, error = StopReason.POLICY_ERROR, f"{type(exc).__name__}: {exc}"
                    break
                llm_s += time.monotonic() - t0
                t_turn = 0.0
                if not out.token_ids:
                    stop, error = StopReason.POLICY_ERROR, "policy returned no tokens"
                    break
                begin = len(response_ids)
                response_ids += out.token_ids
                loss_mask += [1] * len(out.token_ids)
                token_rewards += [0.0] * len(out.token_ids)
                if logprobs is not None and out.logprobs is not None:
                    logprobs += out.logprobs
                else:
                    logprobs = None
                turn_spans.append((begin, len(response_ids)))
                truncated += out.finish_reason == FinishReason.LENGTH
                if config.keep_messages:
                    if inline_open:  # the model continued its own message after an inline observation
                        messages[-1]["content"] += out.text
                    else:
                        messages.append({"role": "assistant", "content": out.text})

                in_thread_call = config.env_calls != "inline"
                raw, dt = await call(env.step, out.text, what=f"env.step (turn {turn})")
                in_thread_call = False
                env_s += dt
                try:
                    step = as_step_output(raw)
                except TypeError as exc:
                    raise _EnvFailure(StopReason.ENV_ERROR, f"TypeError: {exc} (in env.step)") from exc
                reward = float(step.reward)
                token_rewards[-1] += reward
                turn_rewards.append(reward)
                if step.done:
                    stop = StopReason.ENV_DONE
                    break
                if turn == config.max_turns - 1:
                    stop = StopReason.MAX_TURNS
                    break
                # a turn that ended with the template's own end-of-turn token is closed; one cut
                # by a stop string or max_tokens gets the closing text appended (mask 0)
                ended_eos = out.finish_reason == FinishReason.STOP and renderer.closes_turn(out.token_ids[-1])
                obs = list(step.observations)
                inline_open = config.observation_style == "inline" and not ended_eos
                if inline_open:
                    obs_ids = renderer.encode_text("".join(str(m.get("content") or "") for m in obs))
                else:
                    obs_ids = renderer.encode_observation(
                        obs, tools, turn_ended_with_eos=ended_eos, last_token_id=out.token_ids[-1]
                    )
                if len(prompt_ids) + len(response_ids) + len(obs_ids) >= config.max_context_tokens:
                    stop = StopReason.CONTEXT_LIMIT
                    break
                response_ids += obs_ids
                loss_mask += [0] * len(obs_ids)
                token_rewards += [0.0] * len(obs_ids)
                if logprobs is not None:
                    logprobs += [0.0] * len(obs_ids)
                if config.keep_messages:
                    if inline_open:
                        messages[-1]["content"] += "".join(str(m.get("content") or "") for m in obs)
                    else:
                        messages += [dict(m) for m in obs]
    except TimeoutError:  # the episode deadline passed (policy call or inline env call)
        stop = StopReason.DEADLINE
        env_busy = in_thread_call
        if t_turn:
            llm_s += time.monotonic() - t_turn
    except _EnvFailure as failure:
        stop, error = failure.stop, failure.error if failure.stop != StopReason.DEADLINE else None
        env_busy = failure.abandoned
    masked = stop in (StopReason.ENV_ERROR, StopReason.POLICY_ERROR)
    traj = Trajectory(
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        loss_mask=loss_mask,
        rollout_logprobs=logprobs,
        token_rewards=token_rewards,
        reward=sum(turn_rewards),
        stop_reason=stop,
        num_turns=len(turn_spans),
        turn_rewards=turn_rewards,
        turn_spans=turn_spans,
        truncated_turns=truncated,
        llm_seconds=llm_s,
        env_seconds=env_s,
        error=error,
        masked=masked,
        prompt_id=info.prompt_id,
        group_id=info.group_id,
        sample_index=info.sample_index,
        env_id=info.env_id,
        messages=messages,
    )
    return traj, env_busy


def split_steps(traj: Trajectory) -> list[Trajectory]:
    """One training sample per turn (step-wise training).

    Sample ``t`` has ``prompt_ids`` = everything before turn ``t`` (the prompt, earlier turns and
    observations) and ``response_ids`` = the tokens of turn ``t`` alone (all mask 1), with the
    turn's reward at its last token. ``reward`` stays the episode's total, so advantages can be
    computed per episode and shared by its steps; ``turn_rewards`` holds the one turn's reward.
    """
    samples = []
    for t, (start, end) in enumerate(traj.turn_spans):
        turn_reward = traj.turn_rewards[t] if t < len(traj.turn_rewards) else 0.0
        n = end - start
        samples.append(
            Trajectory(
                prompt_ids=traj.prompt_ids + traj.response_ids[:start],
                response_ids=traj.response_ids[start:end],
                loss_mask=[1] * n,
                rollout_logprobs=traj.rollout_logprobs[start:end]
                if traj.rollout_logprobs is not None
                else None,
                token_rewards=[0.0] * (n - 1) + [turn_reward],
                reward=traj.reward,
                stop_reason=traj.stop_reason,
                num_turns=1,
                turn_rewards=[turn_reward],
                turn_spans=[(0, n)],
                truncated_turns=0,
                env_metrics={**traj.env_metrics, "step": t},
                error=traj.error,
                masked=traj.masked,
                prompt_id=traj.prompt_id,
                group_id=traj.group_id,
                sample_index=traj.sample_index,
                env_id=traj.env_id,
            )
        )
    return samples
