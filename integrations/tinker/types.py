"""Data types of the Tinker-compatible server: its configuration, the errors it reports to clients,
and the records it keeps about models, checkpoints and sampling sessions.

Vocabulary (the official client's):

- A **session** is one ``tinker.ServiceClient``; it owns training models and sampling sessions.
- A **training model** (``model_id = "{session_id}:train:{n}"``) is a base model, optionally
  with LoRA adapters, plus an AdamW optimizer. Requests to it run in ``seq_id`` order.
- A **sampling session** samples from a base model or from a snapshot of a training model's
  weights (``save_weights_for_sampler``).
- A **checkpoint path** is ``tinker://{model_id}/weights/{name}`` (weights and optimizer state,
  ``save_state``) or ``tinker://{model_id}/sampler_weights/{name}`` (weights only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError, SkyRLError

__all__ = [
    "TinkerServerConfig",
    "ErrorCategory",
    "TinkerRequestError",
    "LoraSpec",
    "CheckpointKind",
    "TinkerPath",
    "TINY_RANDOM_MODEL",
    "check_name",
]

#: A base-model name every server accepts: a tiny random Llama with the SmolLM2 tokenizer (tests).
TINY_RANDOM_MODEL = "tiny-random"


def _default_checkpoint_dir() -> str:
    root = os.environ.get("SKYRL_CACHE", str(Path.home() / ".cache" / "skyrl"))
    return str(Path(root) / "tinker")


@dataclass(frozen=True)
class TinkerServerConfig:
    """How the Tinker-compatible server runs (``skyrl tinker serve`` sets every field)."""

    checkpoint_dir: str = field(default_factory=_default_checkpoint_dir)
    """Where ``tinker://`` checkpoints are written (one directory per model id)."""
    owner: str = "tml:organization_user:local"
    """What ``training_runs`` report as every run's ``model_owner``: an organization user's URN,
    as Tinker reports it (the server has no accounts; ``whoami`` of a client whose key is not
    checked gives this user)."""
    model_aliases: tuple[tuple[str, str], ...] = ()
    """``(name, path)`` pairs: a client asking for base model ``name`` gets the model at ``path``
    (e.g. ``("Qwen/Qwen3-0.6B", "/models/qwen3-0.6b")``). Besides these, a base model may be
    ``smollm2-135m`` (bundled), ``tiny-random`` (tests) or a local model directory."""
    device: str = "cpu"
    """Torch device of every model (``cpu``, ``cuda``, ``cuda:1``)."""
    dtype: str = "float32"
    """Parameter dtype of the models (``float32`` or ``bfloat16``)."""
    lora_alpha: float = 32.0
    """LoRA scaling numerator (the adapter's output is multiplied by ``lora_alpha / rank``)."""
    micro_batch_size: int = 8
    """Datums per forward/backward pass inside one request (the loss is a sum, so splitting a
    request into micro-batches gives the same gradient)."""
    default_max_tokens: int = 256
    """New tokens per sample when a request sets no ``max_tokens``."""
    long_poll_s: float = 25.0
    """How long ``retrieve_future`` holds a request open before answering ``try_again`` (the
    client's read timeout is 45 s, and it re-polls ``try_again`` at once)."""
    seq_gap_timeout_s: float = 120.0
    """A training request waits for the requests with lower ``seq_id`` of its model; if one of
    them has not arrived after this long (the client died mid-call), the gap is skipped."""
    max_snapshots_per_model: int = 8
    """Unnamed sampler snapshots kept in memory per model (``save_weights_and_get_sampling_client``);
    the oldest beyond this is dropped and sampling from it fails with a clear error."""
    sampler_cache_size: int = 2
    """Sampling models (a base model with a snapshot's weights merged in) kept built at once."""
    result_ttl_s: float = 3600.0
    """Finished request results are kept this long for re-polls, then dropped."""
    session_idle_timeout_s: float = 1800.0
    """A session without a heartbeat (or any request) for this long is closed and its models freed."""
    max_request_bytes: int = 512 * 1024 * 1024
    """Largest request body accepted (a ``forward_backward`` body also after zstd decompression)."""
    max_sample_tokens: int = 4096
    """Most new tokens one sampled sequence may have. A request's ``max_tokens`` (or
    ``default_max_tokens``) is capped at this and at the room the model's context leaves after
    the prompt; a capped sequence ends with stop reason ``length``."""
    max_num_samples: int = 64
    """Most sequences one ``asample`` request may ask for (``num_samples``); more is refused."""
    max_topk_logprobs: int = 256
    """Most logprobs per position one ``asample`` request may ask for: top-k of the prompt and
    of sampled tokens, ``prompt_alt_tokens_k`` draws, ``target_prompt_logprobs`` columns."""
    max_lora_rank: int = 512
    """Largest LoRA rank a ``create_model`` request may ask for."""
    sample_timeout_s: float = 300.0
    """Longest time one sampling request may run on the model worker; past it, it is stopped
    and its future fails with a message that says so. Every sampling future has this deadline,
    so one request can never hold the worker (and every later request) for long."""
    abandoned_after_s: float = 120.0
    """A sampling request whose future nobody has polled for this long (the client went away:
    the official client polls without pause) is dropped if still queued, stopped if running.
    ``cancel_future`` and closing the request's session stop it at once."""
    seed: int = 0
    """Seed for sampling requests without their own seed and for LoRA initialisation without one."""
    fair_worker: bool = True
    """Tenants share the model worker fairly: training models and sampling sessions take turns,
    and a long ``forward_backward`` lets waiting jobs of others run between its micro-batches
    (see :mod:`integrations.tinker._futures`). Off: one first-in, first-out queue."""
    durable: bool = True
    """Keep sessions, training models (their latest weights and optimizer state, written after
    every change), sampling sessions on disk weights and finished results in
    ``<checkpoint_dir>/server.sqlite3``, so a restarted server (even after ``kill -9``) serves the
    same runs (see :mod:`integrations.tinker._store`). Off: everything lives in memory."""
    api_keys: tuple[str, ...] = ()
    """The keys a client may use (the ``api_key`` it sends as ``X-API-Key``). Empty, the
    default: any key is accepted, as on a server only this machine can reach. Set: a request
    with another key, or none, gets 401 (except ``/api/v1/healthz``), which the client raises as
    ``tinker.AuthenticationError``."""
    jwt_auth: bool = True
    """Tinker's JWT exchange (:mod:`integrations.tinker._auth`): clients trade their API key for
    a short-lived signed token at ``/api/v1/auth/token`` and send the token instead, and
    ``RestClient.whoami`` reads their identity from it. Off (``--no-jwt``): clients send the key
    on every request, as before; ``whoami`` then fails in the client."""
    jwt_ttl_s: float = 3600.0
    """How long a token is valid (the client renews it before it expires)."""
    client_flags: tuple[tuple[str, Any], ...] = ()
    """``(flag, value)`` pairs sent to clients on top of the defaults in ``/client/config``
    (e.g. ``("fwdbwd_max_chunk_len", 2)`` to split every ``forward_backward`` into chunks of 2)."""

    def __post_init__(self) -> None:
        if self.micro_batch_size < 1:
            raise ConfigError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.default_max_tokens < 1:
            raise ConfigError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")
        if not 0 < self.long_poll_s < 45:
            raise ConfigError(
                f"long_poll_s must be in (0, 45): the client times a poll out after 45 s, got {self.long_poll_s}"
            )
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        for name in (
            "max_snapshots_per_model",
            "sampler_cache_size",
            "max_sample_tokens",
            "max_num_samples",
            "max_topk_logprobs",
            "max_lora_rank",
            "max_request_bytes",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("sample_timeout_s", "abandoned_after_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.lora_alpha <= 0:
            raise ConfigError(f"lora_alpha must be > 0, got {self.lora_alpha}")
        object.__setattr__(self, "model_aliases", tuple((str(a), str(b)) for a, b in self.model_aliases))
        object.__setattr__(self, "client_flags", tuple((str(k), v) for k, v in self.client_flags))

    def alias(self, name: str) -> str | None:
        """The path configured for base model ``name``, or None."""
        return dict(self.model_aliases).get(name)


class ErrorCategory(StrEnum):
    """Who caused a failed request, as the client reports it (``RequestFailedError.category``)."""

    USER = "user"
    """The request asked for something wrong or unsupported; sending it again fails again."""
    SERVER = "server"
    """The server failed (out of memory, a bug)."""
    UNKNOWN = "unknown"
    """Not known."""


class TinkerRequestError(SkyRLError, ValueError):
    """A request the server cannot serve. Reported to the client in Tinker's error shape,
    ``{"error": message, "category": "user"}``, which the official client raises as
    ``tinker.RequestFailedError``; synchronous routes answer it with HTTP ``status``."""

    def __init__(self, message: str, category: ErrorCategory = ErrorCategory.USER, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.category, self.status = message, ErrorCategory(category), status

    def __reduce__(self):  # noqa: ANN204 - pickle support
        return (self.__class__, (self.message, self.category, self.status))

    def body(self) -> dict[str, Any]:
        """The JSON body the client expects for a failed request."""
        return {"error": self.message, "category": self.category.value}


@dataclass(frozen=True)
class LoraSpec:
    """The LoRA adapters of a training model (the client's ``LoraConfig``)."""

    rank: int
    """Rank of the low-rank matrices."""
    alpha: float
    """Scaling numerator: the adapter's output is multiplied by ``alpha / rank``."""
    train_attn: bool = True
    """Adapters on the attention projections."""
    train_mlp: bool = True
    """Adapters on the MLP projections."""
    train_unembed: bool = True
    """An adapter on the output (unembedding) layer."""
    seed: int | None = None
    """Seed of the adapters' initialisation."""

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise TinkerRequestError(f"lora_config.rank must be >= 1, got {self.rank}")
        if not (self.train_attn or self.train_mlp or self.train_unembed):
            raise TinkerRequestError("lora_config must train at least one of attn, mlp or unembed")

    def same_layout(self, other: LoraSpec | None) -> bool:
        """Whether ``other`` has the same adapters (all but the seed equal): weights fit both."""
        return other is not None and self.to_dict() | {"seed": None} == other.to_dict() | {"seed": None}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (stored in checkpoints)."""
        return {
            "rank": self.rank,
            "alpha": self.alpha,
            "train_attn": self.train_attn,
            "train_mlp": self.train_mlp,
            "train_unembed": self.train_unembed,
            "seed": self.seed,
        }


class CheckpointKind(StrEnum):
    """The two kinds of ``tinker://`` checkpoint."""

    STATE = "weights"
    """Weights and optimizer state (``save_state``), loadable into a training model."""
    SAMPLER = "sampler_weights"
    """Weights only (``save_weights_for_sampler``), for sampling."""


@dataclass(frozen=True)
class TinkerPath:
    """A parsed ``tinker://{model_id}/{kind}/{name}`` checkpoint path."""

    model_id: str
    """The training model that saved it."""
    kind: CheckpointKind
    """Which kind of checkpoint."""
    name: str
    """The name given when saving (may contain ``/``, never ``..``)."""

    PREFIX = "tinker://"

    @classmethod
    def parse(cls, path: str) -> TinkerPath:
        """Parse ``path``, or raise :class:`TinkerRequestError` saying what a valid one looks like.
        Every part must be a plain name (no ``..``, no absolute path): a checkpoint path names a
        directory inside the server's checkpoint directory and nothing else."""
        hint = "expected tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>"
        if not isinstance(path, str) or not path.startswith(cls.PREFIX):
            raise TinkerRequestError(f"checkpoint path {_show(path)} is not a tinker:// path; {hint}")
        parts = path[len(cls.PREFIX) :].split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise TinkerRequestError(f"malformed checkpoint path {_show(path)}; {hint}")
        model_id, kind, name = parts
        if not _MODEL_ID.fullmatch(model_id):
            raise TinkerRequestError(
                f"invalid model id {_show(model_id)} in checkpoint path {_show(path)}: a model id is made of "
                f"letters, digits, '-', '_', '.' and ':' and does not start with '.' or '-'; {hint}"
            )
        try:
            parsed_kind = CheckpointKind(kind)
        except ValueError:
            raise TinkerRequestError(
                f"unknown checkpoint kind {_show(kind)} in {_show(path)}; {hint}"
            ) from None
        return cls(model_id, parsed_kind, check_name(name))

    def __str__(self) -> str:
        return f"{self.PREFIX}{self.model_id}/{self.kind.value}/{self.name}"


_MODEL_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}")
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=+@-]{0,127}")
_MAX_NAME = 255


def _show(value: object) -> str:
    """``value``'s repr, cut to 80 characters (names come from clients)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_name(name: str) -> str:
    """``name`` if it is a safe checkpoint name, else a request error: parts separated by ``/``,
    each of letters, digits and ``_ . : = + @ -`` and not starting with ``.`` or ``-`` (so never
    ``..``, an absolute path or a hidden file), at most 255 characters in all."""
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or len(name) > _MAX_NAME or not all(_NAME_PART.fullmatch(p) for p in parts):
        raise TinkerRequestError(
            f"invalid checkpoint name {_show(name)}: use parts of letters, digits and '_', '-', '.', ':', "
            "'=', '+', '@' (not starting with '.' or '-') separated by '/', at most 255 characters"
        )
    return name
