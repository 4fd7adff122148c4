"""Chat-level episodes: a :class:`~skyrl_agent.types.ChatModel` (a hosted model through
LiteLLM) against a ``skyrl_gym`` env, for evaluation, judges and simulated users.

The same turn skeleton as :func:`skyrl_agent.loop.run_episode` (budgets, deadlines, env
threads and failure handling), with the chat-level strategy :class:`ChatTurns`: text only, so
the trajectory has no token ids (``prompt_ids``/``response_ids`` empty, ``rollout_logprobs``
None) and is not for training; ``max_context_tokens`` does not apply (nothing is counted).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any

from skyrl_agent._episode import play_turns, run_turns
from skyrl_agent._thread_pool import LoopThreadPool
from skyrl_agent.types import ChatModel, EpisodeInfo, RolloutConfig, SamplingParams, StopReason, Trajectory

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
    return await run_turns(
        ChatTurns(model, config),
        env,
        prompt,
        config=config,
        info=info or EpisodeInfo(),
        executor=executor,
        initial=initial,
        close_env=close_env,
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
    turns = ChatTurns(model, config)
    return await play_turns(turns, env, prompt, config=config, info=info, executor=executor, initial=initial)


class ChatTurns:
    """Chat-level turns of one episode: a :class:`ChatModel` answers the whole conversation so
    far with text; the trajectory keeps only the messages (when ``config.keep_messages``)."""

    def __init__(self, model: ChatModel, config: RolloutConfig) -> None:
        self.model, self.config = model, config
        self.messages: list[dict[str, Any]] = []

    def start(self, env: Any, first: Sequence[dict[str, Any]]) -> StopReason | None:
        self.messages = [dict(m) for m in first]
        return None

    def room(self) -> int | None:
        return self.config.max_tokens_per_turn  # no token count: only the per-turn budget

    async def generate(self, turn: int, sampling: SamplingParams) -> str:
        return await self.model.chat(self.messages, sampling)

    def record(self, reply: str) -> str:
        self.messages.append({"role": "assistant", "content": reply})
        return reply

    def observe(self, observations: Sequence[dict[str, Any]]) -> StopReason | None:
        self.messages += [dict(m) for m in observations]
        return None

    def finish(self, traj: Trajectory) -> Trajectory:
        return dataclasses.replace(
            traj,
            num_turns=sum(1 for m in self.messages if m.get("role") == "assistant"),
            messages=self.messages if self.config.keep_messages else [],
        )
