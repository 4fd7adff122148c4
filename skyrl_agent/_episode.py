"""The one episode skeleton, shared by token-level and chat-level turns.

::

    messages = setup_and_init(env, prompt)  # or the engine's set-up stage gave them
    turns.start(env, messages)              # render the prompt / copy the messages
    repeat (max_turns):
        max_tokens = turns.room()           # None: the context is full
        if the episode deadline passed: stop
        reply = await turns.generate(turn, sampling)
        action = turns.record(reply)        # the turn's text
        step = env.step(action)             # in a worker thread, with a deadline
        reward -> a Turn record
        if done or max_turns: stop
        turns.observe(step.observations)    # may stop at the context limit
    turns.finish(trajectory)                # the level's own fields

What differs between the levels is a :class:`Turns` strategy, one object per episode:
:class:`~skyrl_agent.loop.TokenTurns` (a :class:`~skyrl_agent.types.Policy`: token ids, masks,
logprobs, turn spans) and :class:`~skyrl_agent.chat_loop.ChatTurns` (a
:class:`~skyrl_agent.types.ChatModel`: messages only). The skeleton owns the deadlines, the env
calls, the rewards, the stop reasons, the timings and the failure handling; see
:mod:`skyrl_agent.loop` for those rules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from skyrl_agent._env_stages import EnvFailure, env_call, finish_episode, may_grade, setup_and_init
from skyrl_agent._thread_pool import LoopThreadPool
from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.types import (
    ChatModel,
    EpisodeInfo,
    Policy,
    RolloutConfig,
    SamplingParams,
    StopReason,
    Trajectory,
    Turn,
    turn_seed,
)
from skyrl_gym.errors import ConfigError
from skyrl_gym.types import BaseTextEnvStepOutput, as_step_output

__all__ = ["Turns", "UnusableReply", "is_chat_level", "play_turns", "run_turns"]

#: What a set-up stage hands to the play stage: ``env.init``'s messages and info.
Initial = tuple[Sequence[dict[str, Any]], dict[str, Any]]


class UnusableReply(Exception):
    """A reply the policy returned that no turn can be made of (the episode ends with
    ``policy_error`` and this message as its error)."""


class Turns(Protocol):
    """What one level of turns does in an episode (one object per episode)."""

    def start(self, env: Any, first: Sequence[dict[str, Any]]) -> StopReason | None:
        """Take the env's first messages; a stop reason when no turn fits."""
        ...

    def room(self) -> int | None:
        """``max_tokens`` of the next turn; None when the context is full."""
        ...

    async def generate(self, turn: int, sampling: SamplingParams) -> Any:
        """The policy's reply for ``turn`` (raises for a policy failure)."""
        ...

    def record(self, reply: Any) -> str:
        """Append the reply to the episode; return the action for ``env.step``."""
        ...

    def observe(self, observations: Sequence[dict[str, Any]]) -> StopReason | None:
        """Append the env's observations; a stop reason when they do not fit."""
        ...

    def finish(self, traj: Trajectory) -> Trajectory:
        """``traj`` (the skeleton's fields) with the level's own: ids, masks, turns, messages."""
        ...


@dataclass
class _Episode:
    """The skeleton's side of one episode: the env calls under the episode deadline, the
    rewards and the timings, whatever the level of its turns."""

    env: Any
    config: RolloutConfig
    executor: concurrent.futures.Executor | LoopThreadPool | None
    deadline: float
    """The episode's deadline (``time.monotonic()`` clock)."""
    turns: list[Turn] = field(default_factory=list)
    """What each ``env.step`` answered (its reward among it)."""
    llm_s: float = 0.0
    env_s: float = 0.0
    t_turn: float = 0.0
    """When the policy call in flight (if any) started."""
    in_thread: bool = False
    """An env call runs in a thread (the episode deadline may abandon it)."""

    async def first_messages(
        self, prompt: Sequence[dict[str, Any]], initial: Initial | None
    ) -> Sequence[dict[str, Any]]:
        """``env.init``'s messages: from the set-up stage, else ``setup()`` and ``init`` run here."""
        if initial is not None:
            return initial[0]
        self.in_thread = True
        (first, _info), dt = await setup_and_init(
            self.env, prompt, config=self.config, executor=self.executor, deadline=self.deadline
        )
        self.in_thread = False
        self.env_s += dt
        return first

    async def step(self, action: str, turn: int) -> BaseTextEnvStepOutput:
        """``env.step(action)`` in a thread (or inline) with its deadline; raises :class:`EnvFailure`."""
        inline = self.config.env_calls == "inline"
        self.in_thread = not inline
        raw, dt = await env_call(
            self.env.step,
            action,
            executor=self.executor,
            timeout_s=self.config.env_step_timeout_s,
            deadline=self.deadline,
            what=f"env.step (turn {turn})",
            stage=FailureStage.ENV,
            inline=inline,
        )
        self.in_thread = False
        self.env_s += dt
        try:
            return as_step_output(raw)
        except TypeError as exc:
            bad = Failure(FailureStage.ENV, "TypeError", f"{exc} (in env.step)", retriable=False)
            raise EnvFailure(StopReason.ENV_ERROR, bad) from exc


async def play_turns(
    turns: Turns,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    info: EpisodeInfo,
    executor: concurrent.futures.Executor | LoopThreadPool | None,
    initial: Initial | None,
) -> tuple[Trajectory, bool]:
    """Play the turns of one episode (no grading, metrics or closing); return the trajectory
    and whether an env call was left running in its thread (then the env must not be graded)."""
    ep = _Episode(env, config, executor, deadline=time.monotonic() + config.episode_deadline_s)
    stop, env_busy = StopReason.MAX_TURNS, False
    failure: Failure | None = None
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + config.episode_deadline_s):
            first = await ep.first_messages(prompt, initial)
            stop, failure = await _turn_loop(turns, ep, first, info)
    except TimeoutError:  # the episode deadline passed (policy call or inline env call)
        stop, env_busy = StopReason.DEADLINE, ep.in_thread
        if ep.t_turn:
            ep.llm_s += time.monotonic() - ep.t_turn
    except EnvFailure as env_failure:
        stop, failure, env_busy = env_failure.stop, env_failure.failure, env_failure.abandoned
    traj = Trajectory(
        prompt_ids=[],
        response_ids=[],
        loss_mask=[],
        rollout_logprobs=None,
        token_rewards=[],
        reward=sum(turn.reward for turn in ep.turns),
        stop_reason=stop,
        turn_rewards=[turn.reward for turn in ep.turns],
        turns=ep.turns,
        llm_seconds=ep.llm_s,
        env_seconds=ep.env_s,
        error=str(failure) if failure is not None else None,
        failure=failure,
        masked=stop in (StopReason.ENV_ERROR, StopReason.POLICY_ERROR),
        prompt_id=info.prompt_id,
        group_id=info.group_id,
        sample_index=info.sample_index,
        env_id=info.env_id,
    )
    return turns.finish(traj), env_busy


async def _turn_loop(
    turns: Turns, ep: _Episode, first: Sequence[dict[str, Any]], info: EpisodeInfo
) -> tuple[StopReason, Failure | None]:
    """The turns until a stop; returns the stop reason and the failure (raises
    :class:`EnvFailure` and, at the episode deadline, ``CancelledError``)."""
    config = ep.config
    stop = turns.start(ep.env, first)
    for turn in range(config.max_turns if stop is None else 0):
        max_tokens = turns.room()
        if max_tokens is None:
            return StopReason.CONTEXT_LIMIT, None
        if ep.deadline - time.monotonic() <= 0:
            return StopReason.DEADLINE, None
        sampling = config.sampling.with_turn(max_tokens, turn_seed(info.seed, turn))
        ep.t_turn = time.monotonic()
        try:
            # the episode-wide timeout cancels this await when the deadline passes
            reply = await turns.generate(turn, sampling)
        except Exception as exc:  # noqa: BLE001 - recorded, the episode is masked
            return StopReason.POLICY_ERROR, Failure.of(exc, FailureStage.POLICY)
        finally:
            llm_s = time.monotonic() - ep.t_turn
            ep.llm_s += llm_s
            ep.t_turn = 0.0
        env_before = ep.env_s
        step = await ep.step(turns.record(reply), turn)
        ep.turns.append(
            Turn(
                reward=float(step.reward),
                done=bool(step.done),
                truncated=None if step.truncated is None else bool(step.truncated),
                finish_reason=_finish_reason(reply),
                metadata=_json_values(step.metadata),
                action=step.postprocessed_action,
                llm_seconds=llm_s,
                env_seconds=ep.env_s - env_before,
            )
        )
        if step.done:
            return (StopReason.ENV_LIMIT if step.truncated else StopReason.ENV_DONE), None
        if turn == config.max_turns - 1:
            return StopReason.MAX_TURNS, None
        stop = turns.observe(step.observations)
        if stop is not None:
            return stop, None
    return stop or StopReason.MAX_TURNS, None


async def run_turns(
    turns: Turns,
    env: Any,
    prompt: Sequence[dict[str, Any]],
    *,
    config: RolloutConfig,
    info: EpisodeInfo,
    executor: concurrent.futures.Executor | LoopThreadPool | None,
    initial: Initial | None,
    close_env: bool,
) -> Trajectory:
    """A whole episode: :func:`play_turns`, then the finish stage (``env.grade()`` when the
    episode may be graded, the env's metrics, and ``close()`` unless ``close_env`` is False)."""
    traj, env_busy = await play_turns(
        turns, env, prompt, config=config, info=info, executor=executor, initial=initial
    )
    return await finish_episode(
        env, traj, config=config, executor=executor, grade=may_grade(traj, env_busy), close=close_env
    )


def _finish_reason(reply: Any) -> str | None:
    """The finish reason of a token-level reply (a ``GenerateOutput``); None for chat text."""
    reason = getattr(reply, "finish_reason", None)
    return None if reason is None else str(reason)


def _json_values(metadata: Any) -> dict[str, Any]:
    """``metadata`` as JSON values (what a trajectory file can hold): anything else becomes its
    ``str``; a non-dict is kept under ``"value"``."""
    if not metadata:
        return {}
    if not isinstance(metadata, dict):
        metadata = {"value": metadata}
    try:
        return json.loads(json.dumps(metadata, default=str))
    except (TypeError, ValueError):  # keys that are not strings, circular values
        return {str(k): str(v) for k, v in metadata.items()}


def is_chat_level(policy: Any) -> bool:
    """Whether ``policy`` plays chat-level episodes (a :class:`ChatModel`) rather than
    token-level ones (a :class:`Policy`, which wins when an object is both); raises
    ``ConfigError`` for anything else."""
    if isinstance(policy, Policy):
        return False
    if isinstance(policy, ChatModel):
        return True
    raise ConfigError(
        f"{type(policy).__name__} is neither a Policy (a `tokenizer` and `async generate(requests)`, "
        "for token-level episodes) nor a ChatModel (`async chat(messages, sampling)`, for chat-level "
        "episodes); use one of skyrl_agent.policies (HFPolicy, OpenAICompatPolicy, LiteLLMChat) or "
        "give the object those members"
    )
