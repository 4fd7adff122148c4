"""The chat-level turn strategy: a :class:`~skyrl_agent.types.ChatModel` (a hosted model through
LiteLLM) answers the whole conversation with text; no token ids are kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from skyrl_agent.types import ChatModel, RolloutConfig, SamplingParams, StopReason, Trajectory

__all__ = ["ChatTurns"]


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
