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

The same functions play chat-level episodes when given a :class:`~skyrl_agent.types.ChatModel`
instead of a :class:`~skyrl_agent.types.Policy` (see :mod:`skyrl_agent.chat_loop`). The turn
skeleton (deadlines, env calls, stop reasons, failures) lives in ``skyrl_agent._episode``, with
one strategy per level: :class:`TokenTurns` here, ``ChatTurns`` in ``skyrl_agent._chat_turns``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any

from skyrl_agent._chat_turns import ChatTurns
from skyrl_agent._env_stages import EnvFailure
from skyrl_agent._episode import Turns, UnusableReply, is_chat_level, play_turns, run_turns
from skyrl_agent._thread_pool import LoopThreadPool
from skyrl_agent.chat import ChatRenderer
from skyrl_agent.context import drop_old_observations, split_steps
from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.types import (
    ChatModel,
    EpisodeInfo,
    FinishReason,
    GenerateOutput,
    GenerateRequest,
    Policy,
    RolloutConfig,
    SamplingParams,
    Segment,
    StopReason,
    Trajectory,
    turn_seed,
)
from skyrl_gym.errors import ConfigError

__all__ = ["run_episode", "play_episode", "episode_turns", "turn_seed", "EpisodeInfo", "split_steps"]


def episode_turns(
    policy: Policy | ChatModel, renderer: ChatRenderer | None, config: RolloutConfig, info: EpisodeInfo
) -> Turns:
    """The turn strategy for ``policy``: token-level for a :class:`Policy` (``renderer``
    defaults to a :class:`ChatRenderer` of its tokenizer), chat-level for a :class:`ChatModel`
    (a renderer does not apply: raises ``ConfigError``)."""
    if is_chat_level(policy):
        if renderer is not None:
            raise ConfigError("a renderer applies to token-level episodes (a Policy), not to a ChatModel")
        if config.context_strategy != "stop":
            raise ConfigError(
                "context_strategy applies to token-level episodes (a Policy); a ChatModel keeps its own context"
            )
        return ChatTurns(policy, config)  # type: ignore[arg-type]
    return TokenTurns(policy, renderer or ChatRenderer(policy.tokenizer), config, info)  # type: ignore[union-attr]


async def run_episode(
    policy: Policy | ChatModel,
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

    A :class:`Policy` plays token-level turns (``renderer`` defaults to a :class:`ChatRenderer`
    of its tokenizer); a :class:`ChatModel` plays chat-level turns (text only). Env calls run in
    ``executor`` (a ``concurrent.futures`` executor or a ``LoopThreadPool``; default: the event
    loop's). The env's optional ``setup()`` hook runs before
    ``init`` and its optional ``grade()`` hook after the last turn (its reward is added to the
    last turn's). ``initial`` is the result of an ``env.init`` (and ``setup``) already run by
    the caller (the engine's set-up stage); then neither is called here. The env is closed at
    the end unless ``close_env=False``. Never raises for env or policy failures: they are
    recorded.
    """
    info = info or EpisodeInfo()
    turns = episode_turns(policy, renderer, config, info)
    return await run_turns(
        turns, env, prompt, config=config, info=info, executor=executor, initial=initial, close_env=close_env
    )


async def play_episode(
    policy: Policy | ChatModel,
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
    turns = episode_turns(policy, renderer, config, info)
    return await play_turns(turns, env, prompt, config=config, info=info, executor=executor, initial=initial)


class TokenTurns:
    """Token-level turns of one episode: a :class:`Policy` generates token ids from the growing
    token sequence; the prompt is rendered once and each observation's tokens are appended (loss
    mask 0, logprob 0), so the trainer sees exactly the sampled ids."""

    def __init__(
        self, policy: Policy, renderer: ChatRenderer, config: RolloutConfig, info: EpisodeInfo
    ) -> None:
        self.policy, self.renderer, self.config, self.info = policy, renderer, config, info
        self.tools: Sequence[dict[str, Any]] | None = None
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.turn_spans: list[tuple[int, int]] = []
        self.truncated = 0
        self.messages: list[dict[str, Any]] = []
        """The conversation as text, kept only when ``config.keep_messages``."""
        self.inline_open = False
        """The last observation was appended inline: the model continues its own message."""
        self.last_id = 0
        """The last sampled token id."""
        self.last_stopped = False
        """The last turn ended with a stop (not cut by ``max_tokens``)."""
        self.rewrites = config.context_strategy != "stop"
        """A context strategy may rewrite the history (see :mod:`skyrl_agent.context`)."""
        self.history: list[dict[str, Any]] = []
        """The conversation as the model sees it now (kept only when ``rewrites``)."""
        self.n_prompt = 0
        """Messages of the first prompt (never dropped)."""
        self.segments: list[Segment] = []
        """The stretches before each rewrite."""
        self.earlier_turns = 0
        """Turns inside ``segments``."""
        self.env: Any = None

    def start(self, env: Any, first: Sequence[dict[str, Any]]) -> StopReason | None:
        if hasattr(env, "tool_specs"):
            self.tools = env.tool_specs() or None
        self.prompt_ids = self.renderer.encode_prompt(first, self.tools)
        if self.config.keep_messages:
            self.messages = [dict(m) for m in first]
        self.env = env
        if self.rewrites:
            self.history, self.n_prompt = [dict(m) for m in first], len(first)
            if self.config.context_strategy == "summarize" and not callable(
                getattr(env, "summarize_history", None)
            ):
                raise ConfigError(
                    f"context_strategy 'summarize' needs the env ({type(env).__name__}) to define "
                    "summarize_history(messages) -> messages; or use 'drop_observations'"
                )
        return StopReason.CONTEXT_LIMIT if len(self.prompt_ids) >= self.config.max_context_tokens else None

    def room(self) -> int | None:
        room = self.config.max_context_tokens - len(self.prompt_ids) - len(self.response_ids)
        return min(self.config.max_tokens_per_turn, room) if room > 0 else None

    async def generate(self, turn: int, sampling: SamplingParams) -> GenerateOutput:
        request_id = f"{self.info.prompt_id}/{self.info.sample_index}/{turn}"
        request = GenerateRequest(self.prompt_ids + self.response_ids, sampling, request_id)
        out = (await self.policy.generate([request]))[0]
        if not out.token_ids:
            raise UnusableReply("policy returned no tokens")
        return out

    def record(self, reply: GenerateOutput) -> str:
        begin = len(self.response_ids)
        self._append(reply.token_ids, 1, reply.logprobs)
        self.turn_spans.append((begin, len(self.response_ids)))
        self.truncated += reply.finish_reason == FinishReason.LENGTH
        self.last_id, self.last_stopped = reply.token_ids[-1], reply.finish_reason == FinishReason.STOP
        if self.config.keep_messages:
            if self.inline_open:  # the model continued its own message after an inline observation
                self.messages[-1]["content"] += reply.text
            else:
                self.messages.append({"role": "assistant", "content": reply.text})
        if self.rewrites:
            self.history.append({"role": "assistant", "content": reply.text})
        return reply.text

    def observe(self, observations: Sequence[dict[str, Any]]) -> StopReason | None:
        # a turn that ended with the template's own end-of-turn token is closed; one cut by a
        # stop string or max_tokens gets the closing text appended (mask 0)
        ended_eos = self.last_stopped and self.renderer.closes_turn(self.last_id)
        obs = list(observations)
        self.inline_open = self.config.observation_style == "inline" and not ended_eos
        if self.inline_open:
            obs_ids = self.renderer.encode_continued(_inline_text(obs))
        else:
            obs_ids = self.renderer.encode_observation(
                obs, self.tools, turn_ended_with_eos=ended_eos, last_token_id=self.last_id
            )
        used = len(self.prompt_ids) + len(self.response_ids) + len(obs_ids)
        if self.rewrites and used + self.config.max_tokens_per_turn > self.config.max_context_tokens:
            if self._rewrite(obs):  # the episode goes on in a rewritten, shorter context
                return None
        if used >= self.config.max_context_tokens:
            return StopReason.CONTEXT_LIMIT
        self._append(obs_ids, 0, [0.0] * len(obs_ids))
        if self.config.keep_messages:
            if self.inline_open:
                self.messages[-1]["content"] += _inline_text(obs)
            else:
                self.messages += [dict(m) for m in obs]
        if self.rewrites:
            self.history += [dict(m) for m in obs]
        return None

    def _rewrite(self, obs: list[dict[str, Any]]) -> bool:
        """Rewrite the history with the context strategy, observations ``obs`` included, and
        start a new stretch from it; False (nothing changed) when it would still not fit."""
        messages = self.history + [dict(m) for m in obs]
        if self.config.context_strategy == "drop_observations":
            new = drop_old_observations(messages, self.n_prompt, self.config.keep_observations)
        else:
            new = self._summarize(messages)
        if new is None:
            return False
        prompt_ids = self.renderer.encode_prompt(new, self.tools)
        if len(prompt_ids) + self.config.max_tokens_per_turn > self.config.max_context_tokens:
            return False
        self.segments.append(
            Segment(self.prompt_ids, self.response_ids, self.loss_mask, self.logprobs, self.turn_spans)
        )
        self.earlier_turns += len(self.turn_spans)
        self.prompt_ids, self.response_ids, self.loss_mask, self.turn_spans = prompt_ids, [], [], []
        self.logprobs = [] if self.logprobs is not None else None
        self.history = new
        if self.config.keep_messages:  # the viewer's record keeps the whole conversation
            self.messages += [dict(m) for m in obs]
        return True

    def _summarize(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The env's ``summarize_history`` result, checked (a failure is the env's: masked)."""
        try:
            out = self.env.summarize_history([dict(m) for m in messages])
        except Exception as exc:  # noqa: BLE001 - an env failure, recorded and masked
            raise EnvFailure(
                StopReason.ENV_ERROR, Failure.of(exc, FailureStage.ENV, "summarize_history")
            ) from exc
        if not isinstance(out, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in out
        ):
            raise EnvFailure(
                StopReason.ENV_ERROR,
                Failure(
                    FailureStage.ENV,
                    "TypeError",
                    "summarize_history must return a list of messages ({'role': str, 'content': str})",
                    retriable=False,
                ),
            )
        return [dict(m) for m in out]

    def finish(self, traj: Trajectory) -> Trajectory:
        if self.segments and not self.turn_spans:  # a rewrite no turn followed: undo it
            last = self.segments.pop()
            self.prompt_ids, self.response_ids, self.loss_mask = (
                last.prompt_ids,
                last.response_ids,
                last.loss_mask,
            )
            self.logprobs, self.turn_spans = last.rollout_logprobs, last.turn_spans
            self.earlier_turns -= len(last.turn_spans)
        token_rewards = [0.0] * len(self.response_ids)
        own_rewards = traj.turn_rewards[self.earlier_turns :]
        for (_start, end), reward in zip(self.turn_spans, own_rewards, strict=False):
            token_rewards[end - 1] += reward  # each turn's reward sits at its last token
        return dataclasses.replace(
            traj,
            token_rewards=token_rewards,
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            loss_mask=self.loss_mask,
            rollout_logprobs=self.logprobs,
            num_turns=self.earlier_turns + len(self.turn_spans),
            turn_spans=self.turn_spans,
            truncated_turns=self.truncated,
            messages=self.messages,
            segments=self.segments,
            context_strategy=self.config.context_strategy,
            context_rewrites=len(self.segments),
        )

    def _append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None) -> None:
        self.response_ids += ids
        self.loss_mask += [mask] * len(ids)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs += logprobs
        else:
            self.logprobs = None


def _inline_text(observations: Sequence[dict[str, Any]]) -> str:
    return "".join(str(m.get("content") or "") for m in observations)
