"""The JSON request bodies of the Tinker routes, as pydantic models: FastAPI validates every body
with them, and ``/openapi.json`` shows them.

They accept everything the official ``tinker`` client (0.38) sends: fields this server does not
use are ignored (new client releases add some), and so is the ``type`` tag every body carries.
The fields the server uses are strict: the JSON type must be right (no ``"5"`` for 5, no
``true`` for 1), numbers must be finite, and ranges are checked. A body that fails gets HTTP 400
in Tinker's error shape, ``{"error": ..., "category": "user"}``, whose message names the field,
what it must be and what was sent (:func:`validation_message`).

Limits that depend on the server's configuration (``max_num_samples``, ``max_lora_rank``...) and
on the model (vocabulary, context) are checked later, by the state and the model worker.
"""

# No `from __future__ import annotations`: pydantic and FastAPI read the annotations.

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from integrations.tinker.types import TinkerPath, TinkerRequestError, check_name

__all__ = [
    "ErrorBody",
    "SdkVersionBody",
    "CreateSessionBody",
    "SessionBody",
    "FinishBody",
    "TelemetryBody",
    "LoraConfigBody",
    "OptimizerConfigBody",
    "CreateModelBody",
    "ModelIdBody",
    "AdamParamsBody",
    "OptimStepBody",
    "SaveWeightsBody",
    "SaveWeightsForSamplerBody",
    "LoadWeightsBody",
    "CreateSamplingSessionBody",
    "EncodedTextChunkBody",
    "ModelInputBody",
    "SamplingParamsBody",
    "SampleBody",
    "RequestIdBody",
    "WeightsInfoBody",
    "CheckpointTtlBody",
    "validation_message",
]


class _Body(BaseModel):
    """A request body: unknown fields ignored, known ones strictly typed, numbers finite."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, protected_namespaces=())


def _tinker_path(value: str) -> str:
    try:
        TinkerPath.parse(value)
    except TinkerRequestError as exc:
        raise ValueError(exc.message) from None
    return value


def _checkpoint_name(value: str) -> str:
    try:
        return check_name(value)
    except TinkerRequestError as exc:
        raise ValueError(exc.message) from None


#: A ``tinker://{model_id}/{kind}/{name}`` checkpoint path.
TinkerPathStr = Annotated[
    str,
    AfterValidator(_tinker_path),
    Field(description="tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>"),
]
#: A checkpoint name (the ``name`` of ``tinker://{model_id}/{kind}/{name}``).
CheckpointName = Annotated[
    str,
    AfterValidator(_checkpoint_name),
    Field(min_length=1, max_length=255, description="parts of letters, digits and _ . : = + @ - joined by /"),
]
#: A random seed (torch takes any 64-bit value).
Seed = Annotated[int, Field(ge=-(2**63), lt=2**64)]
#: A token id (the wire format packs them as int32).
TokenId = Annotated[int, Field(ge=0, lt=2**31)]
#: A sequence number the client counts up (0, 1, ...).
SeqId = Annotated[int, Field(ge=-(2**31), lt=2**63)]


class ErrorBody(BaseModel):
    """Tinker's error shape: every 4xx answer, and a failed request's future."""

    error: str
    """What went wrong and how to fix it."""
    category: Literal["user", "server", "unknown"]
    """Who caused it: ``user`` (the request; sending it again fails again) or ``server``."""


# ---------------------------------------------------------------------- session
class SdkVersionBody(_Body):
    """``client/config``, ``client/dynamic_config`` and ``auth/token`` (where the client sends an
    empty object: its key is in the headers)."""

    sdk_version: str | None = None


class CreateSessionBody(_Body):
    """``create_session``: one ``ServiceClient``."""

    tags: list[str] = []
    user_metadata: dict[str, Any] | None = None
    sdk_version: str = ""
    project_id: str | None = None
    display_name: str | None = None


class SessionBody(_Body):
    """``session_heartbeat``."""

    session_id: str


class FinishBody(_Body):
    """``sessions/{id}/finish`` (``ServiceClient.close``)."""

    reason: dict[str, Any] | None = None
    detail: Any = None


class TelemetryBody(_Body):
    """``telemetry``: accepted and dropped."""

    events: list[Any] | None = None
    session_id: str | None = None


# ---------------------------------------------------------------------- training
class LoraConfigBody(_Body):
    """The client's ``LoraConfig``."""

    rank: int = Field(ge=1, description="rank of the adapters (the server caps it: max_lora_rank)")
    seed: Seed | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigBody(_Body):
    """The optimizer family of a training model (only ``adamw`` is served)."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    type: str = "adamw"


class CreateModelBody(_Body):
    """``create_model``: a LoRA training model (``lora_config``) or a full fine-tune (none)."""

    session_id: str
    model_seq_id: int = Field(ge=0, lt=2**63)
    base_model: str = Field(max_length=4096)
    user_metadata: dict[str, Any] | None = None
    lora_config: LoraConfigBody | None = None
    optimizer_config: OptimizerConfigBody | None = None


class ModelIdBody(_Body):
    """``get_info`` and ``unload_model``."""

    model_id: str


class AdamParamsBody(_Body):
    """AdamW hyperparameters of one ``optim_step`` (the client's ``AdamParams``)."""

    learning_rate: float = Field(1e-4, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-12, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(0.0, description="maximum global gradient norm; 0 (or less) does not clip")


class _OptimParamsBody(_Body):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    type: str = "unknown"


class OptimStepBody(_Body):
    """``optim_step``: ``adam_params`` (other optimizer families, ``optimizer_params``, are refused)."""

    model_id: str
    seq_id: SeqId | None = None
    adam_params: AdamParamsBody | None = None
    optimizer_params: _OptimParamsBody | None = None


class SaveWeightsBody(_Body):
    """``save_weights`` (the client's ``save_state``): weights and optimizer state."""

    model_id: str
    path: CheckpointName | None = None
    seq_id: SeqId | None = None
    overwrite: bool = False
    ttl_seconds: int | None = None
    user_metadata: dict[str, Any] | None = None


class SaveWeightsForSamplerBody(_Body):
    """``save_weights_for_sampler``: named (``path``) or an in-memory snapshot (no ``path``)."""

    model_id: str
    path: CheckpointName | None = None
    sampling_session_seq_id: int | None = None
    kind: str = "snapshot"
    seq_id: SeqId | None = None
    ttl_seconds: int | None = None
    user_metadata: dict[str, Any] | None = None


class LoadWeightsBody(_Body):
    """``load_weights``: a new model from a checkpoint (``session_id`` + ``model_seq_id``) or the
    legacy ``load_state`` into an existing one (``model_id`` + ``seq_id``)."""

    path: TinkerPathStr
    optimizer: bool = False
    model_id: str | None = None
    seq_id: SeqId | None = None
    session_id: str | None = None
    model_seq_id: int | None = Field(None, ge=0, lt=2**63)
    base_model: str | None = Field(None, max_length=4096)
    optimizer_config: OptimizerConfigBody | None = None
    user_metadata: dict[str, Any] | None = None


# ---------------------------------------------------------------------- checkpoints
class WeightsInfoBody(_Body):
    """``weights_info``: what loading a checkpoint needs."""

    tinker_path: TinkerPathStr


class CheckpointTtlBody(_Body):
    """``PUT /training_runs/{run}/checkpoints/{id}/ttl``: expire in this many seconds, or never
    (null). The range (one hour to ten years) is checked with the checkpoint."""

    ttl_seconds: int | None


# ---------------------------------------------------------------------- sampling
class CreateSamplingSessionBody(_Body):
    """``create_sampling_session`` on a base model or a ``tinker://`` checkpoint."""

    session_id: str
    sampling_session_seq_id: int | None = None
    base_model: str | None = Field(None, max_length=4096)
    model_path: TinkerPathStr | None = None


class EncodedTextChunkBody(_Body):
    """A chunk of token ids (the only chunk type a text model takes)."""

    type: Literal["encoded_text"] = "encoded_text"
    tokens: list[TokenId]


class ModelInputBody(_Body):
    """The client's ``ModelInput``."""

    chunks: list[EncodedTextChunkBody] = Field(min_length=1)

    def tokens(self) -> list[int]:
        """Every chunk's token ids, in order."""
        return [t for chunk in self.chunks for t in chunk.tokens]


class SamplingParamsBody(_Body):
    """The client's ``SamplingParams``."""

    max_tokens: int | None = Field(
        None, ge=1, description="new tokens; capped by the model's context and max_sample_tokens"
    )
    seed: Seed | None = None
    stop: str | list[str] | list[int] | None = Field(
        None, description="stop strings or token ids; [] disables every stop, end-of-sequence included"
    )
    temperature: float = Field(1.0, ge=0)
    top_k: int = Field(-1, ge=-1, description="-1 (or 0) turns the filter off")
    top_p: float = Field(1.0, gt=0, le=1)


class SampleBody(_Body):
    """``asample``: ``num_samples`` continuations of ``prompt``."""

    prompt: ModelInputBody
    sampling_params: SamplingParamsBody
    num_samples: int = Field(1, ge=1, description="capped by the server's max_num_samples")
    sampling_session_id: str | None = None
    seq_id: SeqId | None = None
    base_model: str | None = Field(None, max_length=4096)
    model_path: TinkerPathStr | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = Field(0, ge=0)
    topk_sample_logprobs: int = Field(0, ge=0)
    prompt_alt_tokens_k: int = Field(0, ge=0)
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_logprobs_last_n: int | None = Field(None, ge=1)
    record_stability_info: bool | None = None


# ---------------------------------------------------------------------- futures
class RequestIdBody(_Body):
    """``retrieve_future`` and ``cancel_future``."""

    request_id: str
    allow_metadata_only: bool = False


# ---------------------------------------------------------------------- errors
_TYPE_TAG = re.compile(r"^(str|int|float|bool|none|[a-z]+\[.*\]|function-.*|[A-Z]\w*Body)$")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _explain(err: Mapping[str, Any]) -> str:
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return "must be a JSON object"
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the listed values')}"
    if kind == "value_error":
        return str(err.get("msg", "")).removeprefix("Value error, ")
    msg = str(err.get("msg", "is invalid"))
    return msg[0].lower() + msg[1:] if msg.startswith("Input should") else msg


def validation_message(route: str, errors: Sequence[Mapping[str, Any]]) -> str:
    """One message for a body that failed validation: per field (at most three), its dotted path,
    what it must be and what was sent; then where the schema is."""
    by_field: dict[str, list[Mapping[str, Any]]] = {}
    for err in errors:
        loc = [x for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            why = (err.get("ctx") or {}).get("error") or err.get("msg", "")
            at = f" at character {loc[0]}" if loc and isinstance(loc[0], int) else ""
            return f"invalid {route} request: the body is not valid JSON ({why}{at}); send a JSON object"
        path = ".".join(str(x) for x in loc if not (isinstance(x, str) and _TYPE_TAG.match(x)))
        by_field.setdefault(path, []).append(err)
    parts = []
    for path, errs in list(by_field.items())[:3]:
        if not path:
            parts.append("the request body must be a JSON object (Content-Type: application/json)")
            continue
        quiet = errs[0].get("type") in ("missing", "value_error")  # a value error shows the value itself
        got = "" if quiet else f" (got {_show(errs[0].get('input'))})"
        tags = [str(e["loc"][-1]) for e in errs if e.get("loc") and _TYPE_TAG.match(str(e["loc"][-1]))]
        if len(errs) > 1 and len(tags) == len(errs):
            parts.append(f"{path}: must be one of: {', '.join(tags)}{got}")
        else:
            parts.append(f"{path}: {_explain(errs[0])}{got}")
    more = f" (and {len(by_field) - 3} more fields)" if len(by_field) > 3 else ""
    return f"invalid {route} request: {'; '.join(parts)}{more}; the request schemas are in /openapi.json"
