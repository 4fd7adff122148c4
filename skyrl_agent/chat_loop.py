"""Chat-level episodes: a :class:`~skyrl_agent.types.ChatModel` (a hosted model through
LiteLLM) against a ``skyrl_gym`` env, for evaluation, judges and simulated users.

:func:`skyrl_agent.loop.run_episode` and :func:`~skyrl_agent.loop.play_episode` play them: given
a ``ChatModel`` they use the chat-level strategy (:class:`~skyrl_agent._chat_turns.ChatTurns`),
with the same budgets, deadlines, env threads and failure handling as token-level episodes.
The trajectory is text only (``prompt_ids``/``response_ids`` empty, ``rollout_logprobs`` None)
and is not for training; ``max_context_tokens`` does not apply (nothing is counted). The names
below are the same functions, kept for code that imports them from here.
"""

from __future__ import annotations

from skyrl_agent.loop import play_episode as play_chat_episode
from skyrl_agent.loop import run_episode as run_chat_episode

__all__ = ["run_chat_episode", "play_chat_episode"]
