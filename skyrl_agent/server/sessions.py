"""Per-session records of the server's calls, and their conversion into trajectories.

A session is named by the ``X-Session-ID`` header, else the request's ``user`` field, else
:attr:`ServerConfig.default_session`. Every call of a session is kept as a :class:`CallRecord`
(prompt ids, sampled ids, logprobs, finish reason, messages).

:func:`calls_to_trajectories` turns a session's calls into :class:`~skyrl_agent.types.Trajectory`
objects. A call whose prompt ids start with an earlier call's prompt ids plus one of its sampled
completions *continues* that completion: the ids in between (the template's closing text, the
tool results, the next generation prompt) join the trajectory with loss mask 0 and the new
completion with mask 1. A call that continues nothing starts a new trajectory (step-wise, for
agents that rewrite their history). A call with ``n`` > 1 forks one trajectory per choice.
Only leaves are returned: a trajectory that a later call continued is part of the longer one.

So a session is a tree of branches, and each root-to-leaf path is one trainable trajectory.
A client *retry* (a call with exactly the prompt of an earlier call that nothing continued:
the client never used that answer) replaces the earlier one instead of adding a branch. Each
trajectory's ``session`` (a :class:`~skyrl_agent.types.SessionPlace`) says where it sits:
``branch`` (its index), ``branches``, ``forked_from`` and ``fork_at`` (the other branch it
shares the longest prefix with, and the length of that shared prefix in tokens; None for a lone
branch), ``final`` (it holds the session's last call) and ``retries`` (calls dropped as
retries). :func:`select_paths` picks which paths train:
``"all"``, ``"final"`` or a function of the list.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from skyrl_agent._prefix import common_prefix
from skyrl_agent.server.types import CallRecord, ChoiceRecord
from skyrl_agent.types import SessionPlace, StopReason, Trajectory
from skyrl_gym.errors import ConfigError

__all__ = [
    "SessionStore",
    "calls_to_trajectories",
    "canonical_message",
    "Continuation",
    "with_reward",
    "select_paths",
    "PathRule",
]

#: Which of a session's root-to-leaf paths train: every one, the one holding the last call, or a
#: function of the list (it may drop, keep or reorder; it must return trajectories of the list).
PathRule = Literal["all", "final"] | Callable[[list[Trajectory]], list[Trajectory]]

log = logging.getLogger(__name__)


def _args_key(arguments: Any) -> str:
    """Tool-call arguments as canonical JSON (the raw text when it is not JSON, or nested too
    deeply for the parser)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
        return json.dumps(value, sort_keys=True)
    except (ValueError, TypeError, RecursionError):
        return arguments if isinstance(arguments, str) else repr(arguments)


def canonical_message(message: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for two messages to count as the same turn: role, text content (None and
    "" alike, surrounding blanks ignored) and tool calls by name and decoded arguments (call ids
    are ignored: clients may rewrite them)."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        calls.append((fn.get("name"), _args_key(fn.get("arguments"))))
    content = message.get("content")
    return (
        message.get("role"),
        (content or "").strip() if isinstance(content, str) else content,
        tuple(calls),
    )


@dataclass(frozen=True)
class Continuation:
    """An earlier call's choice that a new chat request continues."""

    call: CallRecord
    """The earlier call."""
    choice: ChoiceRecord
    """Its completion that the new request's history repeats."""
    new_messages: list[dict[str, Any]]
    """The messages after that completion (tool results, the user's next turn)."""


class SessionStore:
    """Thread-safe store of call records by session id (least recently used dropped past
    ``max_sessions``, oldest calls of a session past ``max_calls_per_session``)."""

    def __init__(self, max_sessions: int = 4096, max_calls_per_session: int = 100_000) -> None:
        self.max_sessions = max_sessions
        self.max_calls_per_session = max_calls_per_session
        self._trimmed: set[str] = set()
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, list[CallRecord]] = OrderedDict()

    def record(self, session_id: str, call: CallRecord) -> None:
        """Append ``call`` to ``session_id``."""
        with self._lock:
            calls = self._sessions.setdefault(session_id, [])
            calls.append(call)
            if len(calls) > self.max_calls_per_session:
                del calls[: len(calls) - self.max_calls_per_session]
                if session_id not in self._trimmed:
                    self._trimmed.add(session_id)
                    log.warning("session %r is over %d calls: dropping its oldest", session_id, len(calls))
            self._sessions.move_to_end(session_id)
            while len(self._sessions) > self.max_sessions:
                dropped, old = self._sessions.popitem(last=False)
                log.warning("session store full: dropped session %r (%d calls)", dropped, len(old))

    def get(self, session_id: str) -> list[CallRecord] | None:
        """The calls of ``session_id`` (a copy of the list), or None if unknown."""
        with self._lock:
            calls = self._sessions.get(session_id)
            return list(calls) if calls is not None else None

    def pop(self, session_id: str) -> list[CallRecord] | None:
        """Remove ``session_id`` and return its calls, or None if unknown."""
        with self._lock:
            self._trimmed.discard(session_id)
            return self._sessions.pop(session_id, None)

    def clear(self) -> int:
        """Drop every session; returns how many there were."""
        with self._lock:
            n = len(self._sessions)
            self._sessions.clear()
            self._trimmed.clear()
            return n

    def ids(self) -> dict[str, int]:
        """Session id -> number of calls."""
        with self._lock:
            return {k: len(v) for k, v in self._sessions.items()}

    def trajectories(self, session_id: str, reward: float = 0.0, paths: PathRule = "all") -> list[Trajectory]:
        """:func:`calls_to_trajectories` of ``session_id`` (empty for an unknown session), the
        paths chosen by ``paths`` (:func:`select_paths`)."""
        trajs = calls_to_trajectories(self.get(session_id) or [], reward=reward, session_id=session_id)
        return select_paths(trajs, paths)

    def find_continuation(
        self, session_id: str, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> Continuation | None:
        """The latest chat call of the session whose messages, followed by one of its returned
        assistant messages, begin ``messages``, with only non-assistant messages after them."""
        calls = self.get(session_id) or []
        canon = [canonical_message(m) for m in messages]
        tools_key = json.dumps(tools or None, sort_keys=True)
        for call in reversed(calls):
            n = len(call.messages)
            if call.kind != "chat" or len(messages) <= n + 1:
                continue
            if json.dumps(call.tools or None, sort_keys=True) != tools_key:
                continue
            rest = messages[n + 1 :]
            if any(m.get("role") == "assistant" for m in rest):
                continue
            if [canonical_message(m) for m in call.messages] != canon[:n]:
                continue
            for choice in call.choices:
                if choice.message is not None and canonical_message(choice.message) == canon[n]:
                    return Continuation(call, choice, list(rest))
        return None


@dataclass
class _Node:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    truncated: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    sample_index: int = 0
    extended: bool = False
    call_index: int = -1  # the call whose completion ends this node
    retried: bool = False  # replaced by a later call with the same prompt (a client retry)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def child(self) -> _Node:
        return _Node(
            list(self.prompt_ids),
            list(self.response_ids),
            list(self.loss_mask),
            list(self.logprobs) if self.logprobs is not None else None,
            list(self.spans),
            self.truncated,
            list(self.messages),
            self.sample_index,
        )


def _parent(nodes: list[_Node], prompt_ids: Sequence[int]) -> _Node | None:
    best = None
    for node in nodes:
        if node.length <= len(prompt_ids) and (best is None or node.length > best.length):
            if list(prompt_ids[: node.length]) == node.ids():
                best = node
    return best


def _fork_points(ids: list[list[int]]) -> list[tuple[int | None, int | None]]:
    """For each branch, the other branch it shares the longest token prefix with (the lower
    index on ties) and that prefix's length; (None, None) for a lone branch. The longest prefix
    shared with any other sequence is shared with a neighbour in sorted order."""
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    out: list[tuple[int | None, int | None]] = []
    rank = {i: pos for pos, i in enumerate(order)}
    for i in range(len(ids)):
        pos = rank[i]
        best: tuple[int | None, int | None] = (None, None)
        for other in (order[pos - 1] if pos > 0 else None, order[pos + 1] if pos + 1 < len(order) else None):
            if other is None:
                continue
            n = common_prefix(ids[i], ids[other])
            if best[1] is None or n > best[1] or (n == best[1] and other < (best[0] or 0)):
                best = (other, n)
        out.append(best)
    return out


def select_paths(trajectories: list[Trajectory], rule: PathRule = "all") -> list[Trajectory]:
    """The paths of a session that train: ``"all"``, ``"final"`` (the one holding the session's
    last call, by ``Trajectory.session.final``) or ``rule(trajectories)``."""
    if callable(rule):
        chosen = list(rule(list(trajectories)))
        ids = {id(t) for t in trajectories}
        if any(id(t) not in ids for t in chosen):
            raise ConfigError("a path rule must return trajectories from the list it was given")
        return chosen
    if rule == "all":
        return list(trajectories)
    if rule == "final":
        return [t for t in trajectories if t.session is None or t.session.final][-1:]
    raise ConfigError(f"unknown path rule {rule!r}; use 'all', 'final' or a function of the trajectories")


def calls_to_trajectories(
    calls: Sequence[CallRecord], *, reward: float = 0.0, session_id: str = ""
) -> list[Trajectory]:
    """Turn a session's calls into trajectories (see the module docstring).

    ``reward`` is put at the last generated token of each trajectory (the server knows no
    rewards; score the episode and pass its reward, or set ``token_rewards`` yourself). Every
    trajectory satisfies :meth:`Trajectory.validate`; ``stop_reason`` is ``env_done`` (the
    external agent finished) and ``rollout_logprobs`` is None if any call had none.
    """
    nodes: list[_Node] = []
    by_prompt: dict[tuple[int, ...], list[_Node]] = {}
    for index, call in enumerate(calls):
        key = tuple(call.prompt_ids)
        earlier = [n for n in by_prompt.get(key, []) if not n.extended and not n.retried]
        if earlier:  # the same prompt again and nothing used the answer: a client retry
            for node in earlier:
                node.retried = True
        parent = _parent(nodes, call.prompt_ids)
        if parent is not None:
            parent.retried = False  # its answer was used after all
        for j, choice in enumerate(call.choices):
            if parent is None:
                node = _Node(list(call.prompt_ids), sample_index=j)
            else:
                parent.extended = True
                node = parent.child()
                if len(call.choices) > 1:  # a fork: the choice index tells the branches apart
                    node.sample_index = j
                delta = list(call.prompt_ids[parent.length :])
                node.response_ids += delta
                node.loss_mask += [0] * len(delta)
                if node.logprobs is not None:
                    node.logprobs += [0.0] * len(delta)
            start = len(node.response_ids)
            node.response_ids += choice.token_ids
            node.loss_mask += [1] * len(choice.token_ids)
            if node.logprobs is not None and choice.logprobs is not None:
                node.logprobs += [float(x) for x in choice.logprobs]
            else:
                node.logprobs = None
            node.spans.append((start, len(node.response_ids)))
            node.truncated += choice.finish_reason == "length"
            if call.kind == "chat":
                node.messages = list(call.messages) + ([choice.message] if choice.message else [])
            node.call_index = index
            nodes.append(node)
            by_prompt.setdefault(key, []).append(node)
    leaves = [n for n in nodes if not n.extended and not n.retried]
    retries = len({n.call_index for n in nodes if n.retried})
    last_call = max((n.call_index for n in leaves), default=-1)
    forks = _fork_points([n.ids() for n in leaves])
    out = []
    for k, node in enumerate(leaves):
        turns = len(node.spans)
        forked_from, fork_at = forks[k]
        where = SessionPlace(
            session_id=session_id,
            branch=k,
            branches=len(leaves),
            forked_from=forked_from,
            fork_at=fork_at,
            final=node.call_index == last_call,
            retries=retries,
        )
        traj = Trajectory(
            prompt_ids=node.prompt_ids,
            response_ids=node.response_ids,
            loss_mask=node.loss_mask,
            rollout_logprobs=node.logprobs,
            token_rewards=[0.0] * len(node.response_ids),
            reward=0.0,
            stop_reason=StopReason.ENV_DONE,
            num_turns=turns,
            turn_spans=node.spans,
            truncated_turns=node.truncated,
            session=where,
            prompt_id=session_id,
            sample_index=node.sample_index,
            messages=node.messages,
        )
        traj = with_reward(traj, reward)
        traj.validate()
        out.append(traj)
    return out


def with_reward(traj: Trajectory, reward: float) -> Trajectory:
    """A copy of a captured trajectory scored ``reward``: at its last generated token (the last
    turn's reward; earlier turns 0), as :func:`calls_to_trajectories` puts it. For trajectories
    fetched from ``GET /v1/sessions/{id}`` (``Trajectory.from_dict``) and scored afterwards."""
    token_rewards = [0.0] * len(traj.response_ids)
    last = max((end - 1 for start, end in traj.turn_spans if end > start), default=None)
    if last is not None:
        token_rewards[last] = float(reward)
    turns = len(traj.turn_spans)
    return dataclasses.replace(
        traj,
        token_rewards=token_rewards,
        reward=float(reward),
        turn_rewards=[0.0] * (turns - 1) + [float(reward)] if turns else [],
    )
