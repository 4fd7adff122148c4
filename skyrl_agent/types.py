"""Data types of the agent runtime: what a policy takes and returns, and what an episode yields.

The contract between the runtime and the trainer is :class:`Trajectory`: token ids, a loss mask,
the logprobs the sampler saw, and rewards placed at token positions. The trainer never
re-tokenizes text; the ids in ``prompt_ids + response_ids`` are exactly what the policy was fed
and what it sampled.

Conventions (every producer in this package keeps them):

* ``len(response_ids) == len(loss_mask) == len(token_rewards)`` and, when present,
  ``len(rollout_logprobs) == len(response_ids)``.
* ``loss_mask[i] == 1`` exactly for tokens the policy sampled; observation and template tokens
  appended by the runtime have mask 0 (and logprob 0.0).
* ``rollout_logprobs[i]`` is the log-probability of the sampled token under the policy's raw
  distribution at temperature 1 (``log_softmax(logits)``, before temperature, top-k or top-p).
  That is the quantity a PPO/GRPO importance ratio needs. ``None`` when the policy cannot give
  logprobs (a chat-level API model).
* ``token_rewards[i]`` is zero except at the last generated token of each turn, which holds that
  turn's reward. ``reward == sum(token_rewards)`` unless the episode has no generated token.
* ``masked`` is True when an infrastructure failure (env crash, sandbox timeout, policy error)
  spoiled the episode: the trainer must skip it. Such an episode is never scored as reward 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from skyrl_agent.failures import Failure

__all__ = [
    "PromptItem",
    "EpisodeInfo",
    "EpisodeJob",
    "turn_seed",
    "SamplingParams",
    "GREEDY_BELOW",
    "GenerateRequest",
    "GenerateOutput",
    "FinishReason",
    "Policy",
    "ChatModel",
    "StopReason",
    "Trajectory",
    "Turn",
    "Segment",
    "SessionPlace",
    "RolloutConfig",
    "ObservationStyle",
    "check_context_strategy",
]


# --------------------------------------------------------------------------- policies
#: The smallest normal float32: a ``top_p`` below it is 0 once the sampler compares in float32.
FLOAT32_TINY = 1.1754943508222875e-38
#: The range of a sampling seed: what ``torch.Generator.manual_seed`` takes (int64 or uint64).
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


#: Temperatures below this sample greedily in local samplers: dividing logits by them overflows
#: float32 (vLLM draws the same line).
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn. Every policy honours these (chat-level ones as far as they can)."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax). Local samplers treat values below
    :data:`GREEDY_BELOW` (1e-5) as 0 (as vLLM does): dividing logits by them overflows."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches ``top_p``."""
    top_k: int = 0
    """Keep only the ``top_k`` most likely tokens; 0 turns the filter off."""
    max_tokens: int = 256
    """Most new tokens for this request."""
    stop: tuple[str, ...] = ()
    """Stop strings, checked on the decoded new text. The tokens that complete a stop string are
    kept in the output (they were sampled, so they are trained on)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end generation, besides the model's end-of-sequence tokens."""
    seed: int | None = None
    """Seed for this request's random draws, in ``[SEED_MIN, SEED_MAX]``; None draws from the
    policy's own generator."""
    logprobs: bool = True
    """Return per-token logprobs of the sampled tokens (see the module docstring)."""
    top_logprobs: int = 0
    """Also return, at each sampled position, this many most likely tokens with their raw
    (temperature 1) logprobs (OpenAI's ``top_logprobs``); 0 returns none. Policies that cannot
    give them leave :attr:`GenerateOutput.top_logprobs` None."""
    ignore_eos: bool = False
    """Generate past the model's end-of-sequence tokens: only ``max_tokens``, ``stop`` and
    ``stop_token_ids`` end the generation (vLLM's ``ignore_eos``; the Tinker API's ``stop=[]``)."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not FLOAT32_TINY <= self.top_p <= 1:
            raise ConfigError(
                f"top_p must be in (0, 1] and at least {FLOAT32_TINY:.3g} (smaller values underflow "
                f"float32; use temperature=0 for greedy decoding), got {self.top_p}"
            )
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise ConfigError(
                f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}] (what torch.Generator accepts), "
                f"got {self.seed}"
            )
        if self.top_logprobs < 0:
            raise ConfigError(f"top_logprobs must be >= 0 (0 returns none), got {self.top_logprobs}")
        if isinstance(self.stop, str):
            raise ConfigError(f"stop must be a tuple of strings, not one string: stop=({self.stop!r},)")
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def with_turn(self, max_tokens: int, seed: int | None) -> SamplingParams:
        """A copy with ``max_tokens`` and ``seed`` set, without re-validation (hot path of the
        agent loop; ``max_tokens`` must be >= 1)."""
        new = object.__new__(SamplingParams)
        new.__dict__.update(self.__dict__)
        new.__dict__["max_tokens"] = max_tokens
        new.__dict__["seed"] = seed
        return new

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` applied."""
        import dataclasses

        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class GenerateRequest:
    """One generation: token ids in."""

    prompt_ids: Sequence[int]
    """The whole context so far (first messages, earlier turns, observations), as token ids."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """How to sample."""
    request_id: str = ""
    """Free-form id for logs and servers."""


class FinishReason(StrEnum):
    """Why one generation ended."""

    STOP = "stop"
    """An end-of-sequence token, a stop token id or a stop string was produced."""
    LENGTH = "length"
    """``max_tokens`` was reached."""
    ABORT = "abort"
    """The policy gave up (shut down, weights changing, error)."""


@dataclass
class GenerateOutput:
    """One generation: token ids, logprobs and the finish reason out."""

    token_ids: list[int]
    """The sampled tokens, including a final end-of-sequence token or stop-string tokens."""
    logprobs: list[float] | None
    """Per sampled token: logprob under the raw (temperature 1) distribution; None if unavailable."""
    finish_reason: FinishReason
    """Why generation ended."""
    text: str = ""
    """The decoded ``token_ids`` (special tokens kept), for env parsing and logs."""
    matched_stop: str | int | None = None
    """The stop string or token id that ended generation, if any."""
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """When ``SamplingParams.top_logprobs`` > 0: per sampled token, the most likely
    ``(token_id, raw logprob)`` pairs at that position, most likely first; None otherwise or
    when the policy cannot give them."""


@runtime_checkable
class Policy(Protocol):
    """Token ids in, token ids and logprobs out.

    ``generate`` is batched and asynchronous: pass all pending requests at once, or call it from
    many coroutines concurrently (batching policies gather concurrent calls into one model call).
    ``tokenizer`` is the Hugging Face tokenizer whose ids the policy reads and writes.
    """

    tokenizer: Any

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate one output per request, in order."""
        ...


@runtime_checkable
class ChatModel(Protocol):
    """Messages in, text out: hosted models for evaluation, LLM judges and simulated users.

    No token ids, so its episodes cannot be trained on (see ``skyrl_agent.chat_loop``)."""

    async def chat(self, messages: Sequence[dict[str, Any]], sampling: SamplingParams) -> str:
        """The assistant's reply to ``messages``."""
        ...


# --------------------------------------------------------------------------- episodes
class StopReason(StrEnum):
    """Why an episode ended."""

    ENV_DONE = "env_done"
    """The env said ``done``: the task ended."""
    ENV_LIMIT = "env_limit"
    """The env said ``done`` on a limit of its own (``truncated=True`` in its step output: out
    of tool calls, out of time), not because the task ended."""
    MAX_TURNS = "max_turns"
    """The runtime's turn budget ran out."""
    CONTEXT_LIMIT = "context_limit"
    """The next turn would not fit in ``max_context_tokens``."""
    DEADLINE = "deadline"
    """The per-episode deadline passed (policy or env too slow)."""
    ENV_ERROR = "env_error"
    """The env raised (an infrastructure failure or env bug); the episode is masked."""
    POLICY_ERROR = "policy_error"
    """The policy raised; the episode is masked."""


#: ``messages``: each observation is its own chat message (rendered by the template).
#: ``inline``: observations are appended as plain text inside the running assistant message, so
#: the model continues the same message (the SkyRL-SQL recipe trains this way). This needs turns
#: that end at a stop string (e.g. ``</sql>``); a turn that ended with EOS closed the message, so
#: its observation is rendered as a message instead.
ObservationStyle = Literal["messages", "inline"]


@dataclass
class Turn:
    """One turn of an episode as it happened: what the env's ``step`` answered and what it cost.
    The turn's token ids are the trajectory's, at its ``turn_spans`` entry (its stretch's, after
    a context rewrite); this record holds what the ids do not."""

    reward: float
    """The env's reward for the turn (the last turn's includes ``grade()``'s)."""
    done: bool = False
    """``done`` of the env's step output."""
    truncated: bool | None = None
    """``truncated`` of the env's step output: True when ``done`` came from a limit of the env's
    own; None when the env does not say."""
    finish_reason: str | None = None
    """Why the policy's generation ended (``stop``, ``length``...); None for a chat-level turn."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The env's step metadata (tool calls, error kinds, parsed answers), as JSON values
    (anything else as its ``str``)."""
    action: str | None = None
    """The env's ``postprocessed_action``, when it gave one (the action as the env read it)."""
    llm_seconds: float = 0.0
    """Wall time of the turn's generation."""
    env_seconds: float = 0.0
    """Wall time of the turn's ``env.step``."""


@dataclass
class Segment:
    """An earlier stretch of an episode whose context was rewritten afterwards (see
    :mod:`skyrl_agent.context`): the context the model saw and what followed it, with the same
    invariants as a trajectory's own ids."""

    prompt_ids: list[int]
    """The context the stretch started from (the first prompt, or a rewritten history)."""
    response_ids: list[int]
    """Its sampled turns and the observations between them."""
    loss_mask: list[int]
    """1 where the policy sampled the token."""
    rollout_logprobs: list[float] | None
    """The sampler's logprobs (0.0 at mask-0 positions), or None."""
    turn_spans: list[tuple[int, int]]
    """``[start, end)`` of each turn inside ``response_ids``."""


@dataclass(frozen=True)
class SessionPlace:
    """Where a trajectory captured from an external agent sits in its session (the server's
    calls of one session form a tree; each root-to-leaf path is a trajectory; see
    :mod:`skyrl_agent.server.sessions`)."""

    session_id: str = ""
    """The session's id ("" when the capture was not named)."""
    branch: int = 0
    """This path's index among the session's paths."""
    branches: int = 1
    """How many paths the session has."""
    forked_from: int | None = None
    """The path it shares the longest token prefix with; None for a lone path."""
    fork_at: int | None = None
    """How many tokens that shared prefix holds; None for a lone path."""
    final: bool = True
    """It holds the session's last call."""
    retries: int = 0
    """Calls of the session dropped as client retries."""

    #: The keys these facts had in ``env_metrics`` before they had a record (files of 2026-12).
    LEGACY_KEYS = ("session_id", "branch", "branches", "forked_from", "fork_at", "final", "retries")


@dataclass
class Trajectory:
    """One episode, ready for training (see the module docstring for the invariants)."""

    prompt_ids: list[int]
    """Token ids of the first messages, rendered with the chat template and a generation prompt."""
    response_ids: list[int]
    """Everything after the prompt: sampled turns and appended observation tokens."""
    loss_mask: list[int]
    """1 where the policy sampled the token, 0 for appended observation/template tokens."""
    rollout_logprobs: list[float] | None
    """Raw (temperature 1) logprob of each sampled token; 0.0 at mask-0 positions; None if the
    policy gives none."""
    token_rewards: list[float]
    """Per response token; each turn's reward sits at that turn's last generated token."""
    reward: float
    """Total reward of the episode (sum of the turn rewards)."""
    stop_reason: StopReason
    """Why the episode ended."""
    num_turns: int = 0
    """Turns the policy generated."""
    turn_rewards: list[float] = field(default_factory=list)
    """The env's reward for each turn, in order."""
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    """``[start, end)`` of each generated turn inside ``response_ids``."""
    truncated_turns: int = 0
    """Turns cut by ``max_tokens`` (finish reason ``length``)."""
    llm_seconds: float = 0.0
    """Wall time spent waiting for the policy."""
    env_seconds: float = 0.0
    """Wall time spent in ``env.init``/``env.step``."""
    env_metrics: dict[str, Any] = field(default_factory=dict)
    """``env.get_metrics()`` at the end of the episode."""
    error: str | None = None
    """What went wrong (exception type and message) when the episode failed: ``str(failure)``
    (files written before failures were records carry only this)."""
    failure: Failure | None = None
    """What went wrong, as a record: stage, kind, message, whether a retry may help (see
    :mod:`skyrl_agent.failures`). Set with ``masked`` for a failure that spoiled the episode, and
    alone (not masked) for a failure to close an env after a complete episode."""
    masked: bool = False
    """True when an infrastructure failure spoiled the episode: train on it never."""
    prompt_id: str = ""
    """Id of the dataset row the episode came from."""
    group_id: int = 0
    """Episodes sampled from the same prompt share a group id (GRPO groups)."""
    sample_index: int = 0
    """Index of this sample inside its group."""
    env_id: str = ""
    """Registered id of the env."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation as text, for viewing only (training uses the ids)."""
    grade_reward: float | None = None
    """What the env's ``grade()`` hook returned (already added to the last turn's reward); None
    when the env has no grader or it was not run."""
    segments: list[Segment] = field(default_factory=list)
    """The stretches before each context rewrite (empty for an append-only episode); the ids,
    mask and turn spans above are then the last stretch, while ``turn_rewards`` and
    ``num_turns`` cover every turn. See :mod:`skyrl_agent.context`."""
    context_strategy: str = "stop"
    """``RolloutConfig.context_strategy`` of the episode."""
    context_rewrites: int = 0
    """How often the strategy rewrote the history (``len(segments)``)."""
    policy_version: int | None = None
    """The version of the weights that sampled the episode: the trainer's updates finished when
    its batch started (``skyrl train``), or the version a Ray worker had loaded; None when not
    known (files from before it was recorded, episodes played outside a trainer)."""
    turns: list[Turn] = field(default_factory=list)
    """One record per turn the env answered (see :class:`Turn`; ``turn_rewards`` are their
    rewards). Empty for episodes recorded before turns were, or played outside the runtime
    (server sessions). Training samples cut from an episode carry none."""
    session: SessionPlace | None = None
    """Where a trajectory captured by the server sits in its session; None for episodes the
    runtime played."""

    # ------------------------------------------------------------------ derived
    @property
    def input_ids(self) -> list[int]:
        """``prompt_ids + response_ids``: the whole sequence the trainer scores."""
        return self.prompt_ids + self.response_ids

    @property
    def num_generated_tokens(self) -> int:
        """Number of tokens the policy sampled (mask 1)."""
        return sum(self.loss_mask)

    def validate(self) -> None:
        """Raise ``ValueError`` if the invariants of the module docstring do not hold."""
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.token_rewards) != n:
            raise ValueError(
                f"lengths differ: response_ids {n}, loss_mask {len(self.loss_mask)}, "
                f"token_rewards {len(self.token_rewards)}"
            )
        if self.rollout_logprobs is not None and len(self.rollout_logprobs) != n:
            raise ValueError(f"rollout_logprobs has {len(self.rollout_logprobs)} entries for {n} tokens")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask must hold only 0 and 1")
        for start, end in self.turn_spans:
            if not 0 <= start <= end <= n or any(self.loss_mask[i] != 1 for i in range(start, end)):
                raise ValueError(f"turn span {(start, end)} is not a run of generated tokens")

    def set_failure(self, failure: Failure | str) -> None:
        """Record ``failure`` (``error`` becomes its text; a bare string is kept as ``error`` only)."""
        self.failure = failure if isinstance(failure, Failure) else None
        self.error = str(failure)

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums become strings, tuples lists)."""
        d = asdict(self)
        d["stop_reason"] = str(self.stop_reason)
        d["failure"] = self.failure.to_dict() if self.failure is not None else None
        d["turn_spans"] = [list(s) for s in self.turn_spans]
        for seg in d["segments"]:
            seg["turn_spans"] = [list(x) for x in seg["turn_spans"]]
        return d

    @classmethod
    def failed(
        cls,
        error: Failure | str,
        *,
        prompt_id: str,
        group_id: int,
        sample_index: int,
        env_id: str,
        env_seconds: float = 0.0,
    ) -> Trajectory:
        """An episode that a failure ended before it played: no tokens, masked out of training
        (never scored as reward 0), ``error`` (a :class:`~skyrl_agent.failures.Failure`, or a
        message) saying what went wrong."""
        traj = cls(
            prompt_ids=[],
            response_ids=[],
            loss_mask=[],
            rollout_logprobs=None,
            token_rewards=[],
            reward=0.0,
            stop_reason=StopReason.ENV_ERROR,
            env_seconds=env_seconds,
            masked=True,
            prompt_id=prompt_id,
            group_id=group_id,
            sample_index=sample_index,
            env_id=env_id,
        )
        traj.set_failure(error)
        return traj

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown Trajectory fields {sorted(unknown)}")
        kw = dict(d)
        kw["stop_reason"] = StopReason(kw["stop_reason"])
        failure = kw.get("failure")
        kw["failure"] = Failure.from_dict(failure) if isinstance(failure, Mapping) else failure
        kw["turn_spans"] = [tuple(s) for s in kw.get("turn_spans", [])]
        kw["turns"] = [t if isinstance(t, Turn) else Turn(**t) for t in kw.get("turns") or []]
        session = kw.get("session")
        metrics = kw.get("env_metrics") or {}
        if session is None and {"branch", "branches", "final", "retries"} <= set(metrics):
            # a capture written before SessionPlace (an env's own "branch" metric stays a metric)
            place = {k: metrics[k] for k in SessionPlace.LEGACY_KEYS if k in metrics}
            kw["env_metrics"] = {k: v for k, v in metrics.items() if k not in place}
            session = place
        kw["session"] = SessionPlace(**session) if isinstance(session, Mapping) else session
        kw["segments"] = [
            seg
            if isinstance(seg, Segment)
            else Segment(**{**seg, "turn_spans": [tuple(x) for x in seg["turn_spans"]]})
            for seg in kw.get("segments") or []
        ]
        return cls(**kw)

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(line))


# --------------------------------------------------------------------------- configuration
def check_context_strategy(strategy: str, keep_observations: int, observation_style: str) -> None:
    """Raise ``ConfigError`` for a context strategy (:mod:`skyrl_agent.context`) that cannot run
    (shared by ``RolloutConfig`` and ``TrainConfig``)."""
    from skyrl_gym.errors import ConfigError

    if strategy not in ("stop", "drop_observations", "summarize"):
        raise ConfigError(
            f"unknown context_strategy {strategy!r}; use 'stop', 'drop_observations' or 'summarize'"
        )
    if strategy != "stop" and observation_style != "messages":
        raise ConfigError(
            "context_strategy rewrites the history as chat messages, so it needs observation_style='messages'"
        )
    if keep_observations < 1:
        raise ConfigError(
            f"keep_observations must be >= 1 (the newest observation is always shown), got {keep_observations}"
        )


@dataclass(frozen=True)
class RolloutConfig:
    """Budgets and knobs of the agent loop and the rollout engine (pickles; builds nothing)."""

    max_turns: int = 8
    """Most policy turns per episode (the env may end sooner)."""
    max_tokens_per_turn: int = 256
    """Most new tokens per turn (overrides ``sampling.max_tokens``)."""
    max_context_tokens: int = 4096
    """Most tokens in ``prompt_ids + response_ids``; a turn is cut to fit, and the episode stops
    with ``context_limit`` when no room is left."""
    episode_deadline_s: float = 600.0
    """Wall-clock deadline of one episode; passing it stops the episode with ``deadline``."""
    env_step_timeout_s: float = 60.0
    """Deadline of one ``env.init``/``env.step`` call; passing it is an env failure (masked)."""
    env_setup_timeout_s: float = 300.0
    """Deadline of building one env (``skyrl_gym.make``: starting a container, building an
    image) and of its ``setup()`` hook; passing it is an infrastructure failure (masked)."""
    env_grade_timeout_s: float = 600.0
    """Deadline of the env's ``grade()`` hook (a verifier, a test suite), run after the episode
    left its generation slot; passing it is an infrastructure failure (masked)."""
    observation_style: ObservationStyle = "messages"
    """How observations join the context (see :data:`ObservationStyle`)."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Sampling parameters of every turn (``max_tokens`` is capped by the budgets)."""
    n_samples: int = 1
    """Episodes per prompt (a GRPO group)."""
    concurrency: int = 16
    """Most episodes in flight at once."""
    env_threads: int = 16
    """Threads that run env calls (env code is synchronous)."""
    env_calls: Literal["thread", "inline"] = "thread"
    """``thread``: ``env.init``/``env.step`` run in the thread pool, so a slow env never stalls
    the other episodes, and a call past its deadline is abandoned. ``inline``: they run on the
    event loop, saving the thread hop (tens of microseconds a call), for envs whose steps are
    instant (string checks); a deadline is then only checked after the call returns."""
    max_retries: int = 1
    """Retries of an episode that failed for infrastructure reasons before it is recorded as
    masked."""
    seed: int = 0
    """Base seed: episode (prompt p, sample s) samples with a seed derived from (seed, p, s), so a
    run repeats exactly with the same seed and policy."""
    step_wise: bool = False
    """Also emit one training sample per turn (for agents whose history is not append-only)."""
    context_strategy: Literal["stop", "drop_observations", "summarize"] = "stop"
    """What an episode does when the next observation and a full turn would not fit in
    ``max_context_tokens``: ``stop`` (stop reason ``context_limit``), ``drop_observations``
    (blank all but the last ``keep_observations`` observations and go on) or ``summarize`` (the
    env's ``summarize_history`` hook rewrites the history). See :mod:`skyrl_agent.context`."""
    keep_observations: int = 2
    """``drop_observations``: how many of the most recent observations stay in full."""
    keep_messages: bool = True
    """Record the text conversation in each trajectory (for viewers)."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        for name in ("max_turns", "max_tokens_per_turn", "max_context_tokens", "n_samples", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"RolloutConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.env_threads < 1:
            raise ConfigError(f"RolloutConfig.env_threads must be >= 1, got {self.env_threads}")
        if (
            min(
                self.episode_deadline_s,
                self.env_step_timeout_s,
                self.env_setup_timeout_s,
                self.env_grade_timeout_s,
            )
            <= 0
        ):
            raise ConfigError("deadlines must be positive seconds")
        check_context_strategy(self.context_strategy, self.keep_observations, self.observation_style)
        if self.observation_style not in ("messages", "inline"):
            raise ConfigError(
                f"unknown observation_style {self.observation_style!r}; use 'messages' or 'inline'"
            )
        if self.env_calls not in ("thread", "inline"):
            raise ConfigError(f"unknown env_calls {self.env_calls!r}; use 'thread' or 'inline'")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")


# --------------------------------------------------------------------------- episodes of a batch
@dataclass(frozen=True)
class PromptItem:
    """One dataset row: which env to build, with what, and the first messages."""

    env_id: str
    """Registered env id passed to ``skyrl_gym.make``."""
    prompt: tuple[dict[str, Any], ...]
    """Messages passed to ``env.init``."""
    env_config: Mapping[str, Any] = field(default_factory=dict)
    """``env_config`` for the env."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """``extras`` (the row's fields) for the env."""
    prompt_id: str = ""
    """Row id (``load_prompts`` uses the row's ``id``, else its line number minus one); the
    engine falls back to the group index."""


@dataclass(frozen=True)
class EpisodeInfo:
    """Where an episode comes from (copied into its :class:`Trajectory`)."""

    prompt_id: str = ""
    """Id of the dataset row."""
    group_id: int = 0
    """Group (prompt) index; samples of one prompt share it."""
    sample_index: int = 0
    """Index of the sample inside its group."""
    env_id: str = ""
    """Registered env id."""
    seed: int = 0
    """Episode seed; each turn samples with ``turn_seed(seed, turn)``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form, not copied."""


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of ``turn`` in an episode seeded ``episode_seed`` (stable across runs)."""
    return (episode_seed * 1_000_003 + turn * 7919 + 17) % (2**63)


#: One episode of a batch: (group index, sample index, the row).
EpisodeJob = tuple[int, int, PromptItem]
