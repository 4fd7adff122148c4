"""The two binary encodings of the protocol, read and written with the client's own protobuf
schema (``tinker.proto.tinker_public_pb2``): the ``forward_backward`` request body (possibly
zstd-compressed) and the ``ForwardBackwardOutput`` / ``SampleResponse`` results.

Layouts (schema ``tinker_public.proto``): token ids travel as int32 little-endian bytes, tensors
as dense bytes (or sparse CSR) with a ``DType``; a ``BatchedTensor`` concatenates every datum's
data and gives int64 *byte* offsets (``num_datums + 1`` of them); missing prompt logprobs are NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from integrations.tinker.types import TinkerRequestError
from skyrl_gym.errors import require

__all__ = [
    "WireDatum",
    "FwdBwdRequest",
    "decode_body",
    "parse_forward_backward",
    "encode_forward_backward_output",
    "encode_sample_response",
    "EncodedSequence",
    "TargetPromptIds",
    "decode_target_prompt_ids",
    "model_input_tokens",
]


def _pb() -> Any:
    return require("tinker.proto.tinker_public_pb2", "tinker", "the Tinker-compatible server")


@dataclass(frozen=True)
class WireDatum:
    """One datum: the model input's token ids and its ``loss_fn_inputs`` as numpy arrays."""

    tokens: np.ndarray
    """int64 ``[N]``."""
    inputs: dict[str, np.ndarray]
    """``loss_fn_inputs`` by name (float32 or int64, ``[N]`` or ``[N, K]``)."""


@dataclass(frozen=True)
class FwdBwdRequest:
    """A decoded ``ForwardBackwardRequest``."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[WireDatum]


def decode_body(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """``body`` decompressed when ``Content-Encoding`` is zstd (at most ``max_bytes``)."""
    enc = (content_encoding or "").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc != "zstd":
        raise TinkerRequestError(f"unsupported Content-Encoding {content_encoding!r} (zstd or none)")
    zstandard: Any = require("zstandard", "tinker", "zstd-compressed requests")
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(body)
        out = reader.read(max_bytes + 1)
    except zstandard.ZstdError as exc:
        raise TinkerRequestError(f"the zstd request body does not decompress: {exc}") from None
    if len(out) > max_bytes:
        raise TinkerRequestError(f"the request body is larger than {max_bytes} bytes after decompression")
    return out


def _tensor(msg: Any, where: str, rows: int, max_bytes: int) -> np.ndarray:
    """A ``Tensor`` message as a numpy array of ``rows`` rows (``[rows]`` or ``[rows, K]``);
    ``where`` names it in errors. A sparse CSR tensor must have well-formed indices."""
    pb = _pb()
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
    np_dtype = dtypes.get(msg.dtype)
    if np_dtype is None:
        raise TinkerRequestError(f"{where}: unsupported dtype {msg.dtype} (send float32 or int64)")
    shape = [int(s) for s in msg.shape]
    layout = f"[{rows}] or [{rows}, K]"
    if shape and (len(shape) > 2 or shape[0] != rows or min(shape) < 0):
        raise TinkerRequestError(
            f"{where} has shape {shape}; inputs are per position, of shape {layout}: "
            "target_tokens[i] is the token after model_input[i]"
        )
    itemsize = np.dtype(np_dtype).itemsize
    if shape and math.prod(shape) * itemsize > max_bytes:
        raise TinkerRequestError(f"{where}: shape {shape} is larger than this server's max_request_bytes")
    if msg.HasField("sparse_csr"):
        return _sparse(msg.sparse_csr, np_dtype, shape, where)
    if len(msg.dense) % itemsize:
        raise TinkerRequestError(f"{where}: {len(msg.dense)} data bytes are not a whole number of values")
    arr = np.frombuffer(msg.dense, dtype=np_dtype)
    if not shape:
        shape = [arr.size]
    if math.prod(shape) != arr.size:
        raise TinkerRequestError(f"{where}: {arr.size} values for shape {shape}")
    if shape[0] != rows:
        raise TinkerRequestError(f"{where} has {shape[0]} values; inputs are per position, of shape {layout}")
    return arr.reshape(shape)


def _sparse(csr: Any, np_dtype: Any, shape: list[int], where: str) -> np.ndarray:
    """The dense array of a sparse CSR tensor, after checking its indices."""
    if len(shape) != 2:
        raise TinkerRequestError(f"{where}: a sparse CSR tensor needs a 2-D shape [rows, columns]")
    for name, raw, size in (
        ("values", csr.values, np.dtype(np_dtype).itemsize),
        ("crow_indices", csr.crow_indices, 8),
        ("col_indices", csr.col_indices, 8),
    ):
        if len(raw) % size:
            raise TinkerRequestError(f"{where}: sparse {name} bytes are not a whole number of values")
    values = np.frombuffer(csr.values, dtype=np_dtype)
    crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
    col = np.frombuffer(csr.col_indices, dtype=np.int64)
    return _csr_to_dense(values, crow, col, shape, where, fill=0)


def _csr_to_dense(
    values: np.ndarray, crow: np.ndarray, col: np.ndarray, shape: list[int], where: str, fill: int
) -> np.ndarray:
    """The dense ``[rows, columns]`` array of CSR ``values``/``crow``/``col`` (``fill`` where no
    value is listed), after checking the indices."""
    n_rows, n_cols = shape
    if crow.size != n_rows + 1 or crow[0] != 0 or np.any(np.diff(crow) < 0) or crow[-1] != values.size:
        raise TinkerRequestError(
            f"{where}: sparse crow_indices must be {n_rows + 1} non-decreasing offsets from 0 to the number "
            f"of values ({values.size})"
        )
    if col.size != values.size or (col.size and (col.min() < 0 or col.max() >= n_cols)):
        raise TinkerRequestError(
            f"{where}: sparse col_indices must give one column in [0, {n_cols}) per value ({values.size})"
        )
    dense = np.full(shape, fill, dtype=values.dtype)
    dense[np.repeat(np.arange(n_rows), np.diff(crow)), col] = values
    return dense


def _chunks_to_tokens(chunks: Sequence[Any], where: str) -> np.ndarray:
    parts = []
    for chunk in chunks:
        which = chunk.WhichOneof("chunk")
        if which != "encoded_text":
            raise TinkerRequestError(
                f"{where}: chunk of type {which!r} is not supported: this server trains text models "
                "(encoded_text chunks only)"
            )
        raw = chunk.encoded_text.tokens
        if len(raw) % 4:
            raise TinkerRequestError(f"{where}: encoded_text tokens must be int32 values (4 bytes each)")
        parts.append(np.frombuffer(raw, dtype=np.int32).astype(np.int64))
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if tokens.size and tokens.min() < 0:
        raise TinkerRequestError(f"{where}: token ids must be >= 0, got {int(tokens.min())}")
    return tokens


def parse_forward_backward(body: bytes, max_bytes: int = 512 * 1024 * 1024) -> FwdBwdRequest:
    """Decode a protobuf ``ForwardBackwardRequest`` body (no tensor may be larger than ``max_bytes``)."""
    pb = _pb()
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise TinkerRequestError(
            f"the forward_backward body is not a ForwardBackwardRequest protobuf ({exc}); "
            "this server speaks the wire format of tinker >= 0.25"
        ) from None
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():  # v2 wins: it also carries strings
        config[k] = v.text if v.WhichOneof("value") == "text" else float(v.number)
    for k, v in config.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise TinkerRequestError(f"loss_fn_config[{k!r}] must be a finite number, got {v}")
    data = []
    for i, d in enumerate(msg.data):
        tokens = _chunks_to_tokens(d.model_input, f"datum {i}: model_input")
        if tokens.size == 0:
            raise TinkerRequestError(f"datum {i} has an empty model_input")
        inputs = {
            name: _tensor(t, f"datum {i}: loss_fn_inputs[{name!r}]", tokens.size, max_bytes)
            for name, t in d.loss_fn_inputs.items()
        }
        data.append(WireDatum(tokens=tokens, inputs=inputs))
    return FwdBwdRequest(
        model_id=msg.model_id,
        seq_id=int(msg.seq_id),
        loss_fn=msg.loss_fn,
        loss_fn_config=config,
        forward_only=bool(msg.forward_only),
        data=data,
    )


def _batched(arrays: Sequence[np.ndarray], dtype: Any) -> Any:
    pb = _pb()
    proto_dtype = {np.float32: pb.DTYPE_FLOAT32, np.int64: pb.DTYPE_INT64}[dtype]
    flat = [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]
    offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([a.nbytes for a in flat])
    bt = pb.BatchedTensor()
    bt.data = b"".join(a.tobytes() for a in flat)
    bt.offsets = offsets.tobytes()
    bt.dtype = proto_dtype
    return bt


def encode_forward_backward_output(
    outputs: Sequence[Mapping[str, np.ndarray]], metrics: Mapping[str, float]
) -> bytes:
    """A ``ForwardBackwardOutput``: one float32 field per name for every datum (``[N]`` or
    ``[N, K]``), plus ``metrics`` (keys must look like ``name:reduction``; the client merges chunk
    results by them)."""
    pb = _pb()
    for key in metrics:
        if key.count(":") != 1:
            raise ValueError(f"metric key {key!r} must have the form name:reduction (e.g. loss:sum)")
    msg = pb.ForwardBackwardOutput()
    msg.loss_fn_output_type = "ArrayRecord"
    for k, v in metrics.items():
        msg.metrics[k] = float(v)
    start = 0
    while start < len(outputs):  # one record per run of datums whose fields share trailing shapes
        layout = {name: a.shape[1:] for name, a in outputs[start].items()}
        end = start + 1
        while end < len(outputs) and {n: a.shape[1:] for n, a in outputs[end].items()} == layout:
            end += 1
        record = msg.loss_fn_outputs.add()
        record.type_tag = "ArrayRecord"
        record.num_datums = end - start
        for name, trailing in layout.items():
            bt = _batched([o[name] for o in outputs[start:end]], np.float32)
            bt.trailing_shape.extend(int(d) for d in trailing)
            record.fields[name].CopyFrom(bt)
        start = end
    return msg.SerializeToString()


@dataclass(frozen=True)
class EncodedSequence:
    """One sampled sequence for :func:`encode_sample_response`."""

    tokens: Sequence[int]
    logprobs: Sequence[float] | None
    stopped: bool
    """True when a stop condition ended it, False when ``max_tokens`` did."""
    topk: tuple[np.ndarray, np.ndarray] | None = None
    """``topk_sample_logprobs``: ``(token_ids [n, k] int32, logprobs [n, k] float32)``, one row
    per sampled token, empty cells (token 0, logprob -99999) where a row has fewer than ``k``."""


@dataclass(frozen=True)
class TargetPromptIds:
    """A request's ``target_prompt_logprobs``: token ids to score at each prompt position."""

    ids: np.ndarray
    """int64 ``[len(prompt) - 1, K]``; ``-1`` (also every cell a sparse tensor leaves out)
    requests nothing."""
    crow: np.ndarray | None = None
    """The sparse CSR row pointers when the request was sparse (the answer keeps its layout)."""
    col: np.ndarray | None = None
    """The sparse CSR column indices when the request was sparse."""


def decode_target_prompt_ids(obj: Any, rows: int, vocab: int, max_k: int) -> TargetPromptIds:
    """The JSON ``TensorData`` of ``target_prompt_logprobs``, checked: int64 ids in
    ``[-1, vocab)``, shape ``[rows, K]`` (``rows = len(prompt) - 1``, ``K <= max_k``), dense or
    sparse CSR."""
    where = "target_prompt_logprobs"
    if not isinstance(obj, Mapping) or not isinstance(obj.get("data"), list):
        raise TinkerRequestError(f"{where} must be a TensorData object with a 'data' list")
    if obj.get("dtype") != "int64":
        raise TinkerRequestError(
            f"{where} must be an int64 tensor of token ids, got dtype {obj.get('dtype')!r}"
        )
    shape = obj.get("shape")
    if not (
        isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and d >= 0 for d in shape)
    ):
        raise TinkerRequestError(f"{where} must be 2-D, [len(prompt) - 1, K], got shape {shape!r}")
    if shape[0] != rows:
        raise TinkerRequestError(
            f"{where} has {shape[0]} rows; the prompt has {rows + 1} tokens, so it needs {rows}"
        )
    if shape[1] > max_k:
        raise TinkerRequestError(
            f"{where} asks for {shape[1]} ids per position, more than this server's max_topk_logprobs ({max_k})"
        )
    data = obj["data"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in data):
        raise TinkerRequestError(f"{where}: data must be integer token ids (or -1 for no request)")
    values = np.asarray(data, dtype=np.int64)
    if values.size and (values.min() < -1 or values.max() >= vocab):
        raise TinkerRequestError(
            f"{where}: token ids must be in [0, {vocab}) or -1, got {int(values.min())}..{int(values.max())}"
        )
    crow_l, col_l = obj.get("sparse_crow_indices"), obj.get("sparse_col_indices")
    if crow_l is None and col_l is None:
        if values.size != shape[0] * shape[1]:
            raise TinkerRequestError(f"{where}: {values.size} values do not fill the shape {shape}")
        return TargetPromptIds(values.reshape(shape))
    if not (isinstance(crow_l, list) and isinstance(col_l, list)):
        raise TinkerRequestError(
            f"{where}: a sparse tensor needs both sparse_crow_indices and sparse_col_indices"
        )
    crow, col = np.asarray(crow_l, dtype=np.int64), np.asarray(col_l, dtype=np.int64)
    dense = _csr_to_dense(values, crow, col, shape, where, fill=-1)
    return TargetPromptIds(dense, crow, col)


def _fill_tensor(msg: Any, dense: np.ndarray, dtype: int, layout: TargetPromptIds | None = None) -> None:
    """Fill a proto ``Tensor`` with ``dense``, sparse CSR when ``layout`` was sparse."""
    msg.dtype = dtype
    msg.shape.extend(int(d) for d in dense.shape)
    if layout is not None and layout.crow is not None and layout.col is not None:
        row_of = np.repeat(np.arange(dense.shape[0]), np.diff(layout.crow))
        msg.sparse_csr.values = np.ascontiguousarray(dense[row_of, layout.col]).tobytes()
        msg.sparse_csr.crow_indices = layout.crow.astype(np.int64).tobytes()
        msg.sparse_csr.col_indices = layout.col.astype(np.int64).tobytes()
    else:
        msg.dense = np.ascontiguousarray(dense).tobytes()


def _topk(msg: Any, ids: np.ndarray, lps: np.ndarray) -> None:
    msg.token_ids = np.ascontiguousarray(ids, dtype=np.int32).tobytes()
    msg.logprobs = np.ascontiguousarray(lps, dtype=np.float32).tobytes()
    msg.length, msg.k = ids.shape


def encode_sample_response(
    sequences: Sequence[EncodedSequence],
    prompt_logprobs: Sequence[float] | None,
    topk_prompt: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    target_prompt: tuple[np.ndarray, TargetPromptIds] | None = None,
    alt_tokens: tuple[np.ndarray, np.ndarray] | None = None,
) -> bytes:
    """A ``SampleResponse``; ``prompt_logprobs`` uses NaN where a position has none;
    ``topk_prompt`` is ``(token_ids [P, k] int32, logprobs [P, k] float32)``, with empty cells
    (token 0, logprob -99999) where a position has none. ``target_prompt``: the logprobs
    (float32, the request's shape, 0 where it asked nothing) and the request, whose dense or
    sparse layout the answer keeps. ``alt_tokens``: ``(token_ids [P-1, k] int64, logprobs
    [P-1, k] float32)``."""
    pb = _pb()
    msg = pb.SampleResponse()
    for s in sequences:
        seq = msg.sequences.add()
        seq.stop_reason = pb.STOP_REASON_STOP if s.stopped else pb.STOP_REASON_LENGTH
        seq.tokens = np.asarray(list(s.tokens), dtype=np.int32).tobytes()
        if s.logprobs is not None:
            seq.logprobs = np.asarray(list(s.logprobs), dtype=np.float32).tobytes()
        if s.topk is not None:
            _topk(seq.topk_sampled_logprobs, *s.topk)
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(list(prompt_logprobs), dtype=np.float32).tobytes()
    if topk_prompt is not None:
        _topk(msg.topk_prompt_logprobs, *topk_prompt)
    if target_prompt is not None:
        values, request = target_prompt
        _fill_tensor(msg.target_prompt_logprobs, values.astype(np.float32), pb.DTYPE_FLOAT32, request)
    if alt_tokens is not None:
        ids, lps = alt_tokens
        _fill_tensor(msg.prompt_alt_tokens.tokens, ids.astype(np.int64), pb.DTYPE_INT64)
        _fill_tensor(msg.prompt_alt_tokens.logprobs, lps.astype(np.float32), pb.DTYPE_FLOAT32)
    return msg.SerializeToString()


def model_input_tokens(model_input: Mapping[str, Any]) -> list[int]:
    """The token ids of a JSON ``ModelInput`` (``{"chunks": [{"type": "encoded_text", "tokens": [...]}]}``)."""
    if not isinstance(model_input, Mapping) or not isinstance(model_input.get("chunks"), list):
        raise TinkerRequestError('prompt must be a ModelInput: {"chunks": [...]}')
    tokens: list[int] = []
    for chunk in model_input["chunks"]:
        kind = chunk.get("type", "encoded_text") if isinstance(chunk, Mapping) else None
        if kind != "encoded_text" or not isinstance(chunk.get("tokens"), list):
            raise TinkerRequestError(
                f"prompt chunk of type {kind!r} is not supported: this server samples text models "
                "(encoded_text chunks only)"
            )
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in chunk["tokens"]):
            raise TinkerRequestError("prompt tokens must be integer token ids >= 0")
        tokens.extend(chunk["tokens"])
    return tokens
