"""Our protobuf reading and writing against the client's own converters (tinker.proto)."""

from __future__ import annotations

import math

import numpy as np
import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")
zstandard = pytest.importorskip("zstandard")

from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from integrations.tinker._wire import (  # noqa: E402
    EncodedSequence,
    decode_body,
    decode_target_prompt_ids,
    encode_forward_backward_output,
    encode_sample_response,
    model_input_tokens,
    parse_forward_backward,
)
from integrations.tinker.types import TinkerRequestError  # noqa: E402


def _request(loss_fn_config=None):
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints([1, 2, 3]),
            loss_fn_inputs={
                "target_tokens": [2, 3, 4],
                "logprobs": [-1.0, -2.0, -0.5],
                "advantages": [0.0, 1.0, 1.0],
            },
        ),
        types.Datum(
            model_input=types.ModelInput.from_ints([7, 8]),
            loss_fn_inputs={
                "target_tokens": np.array([8, 9]),
                "logprobs": [-0.1, -0.2],
                "advantages": [1.0, -1.0],
            },
        ),
    ]
    return types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn="ppo", loss_fn_config=loss_fn_config
        ),
        model_id="s1:train:0",
        seq_id=3,
    )


def test_forward_backward_request_round_trip():
    raw = forward_backward_request_to_proto(_request({"clip_low_threshold": 0.7, "clip_high_threshold": 1.3}))
    body = raw.SerializeToString()
    req = parse_forward_backward(body)
    assert (req.model_id, req.seq_id, req.loss_fn, req.forward_only) == ("s1:train:0", 3, "ppo", False)
    assert req.loss_fn_config == pytest.approx({"clip_low_threshold": 0.7, "clip_high_threshold": 1.3})
    assert [d.tokens.tolist() for d in req.data] == [[1, 2, 3], [7, 8]]
    assert req.data[0].inputs["target_tokens"].dtype == np.int64
    assert req.data[1].inputs["target_tokens"].tolist() == [8, 9]
    assert req.data[0].inputs["logprobs"].tolist() == pytest.approx([-1.0, -2.0, -0.5])
    # zstd-compressed bodies (the proto_compress_fwdbwd flag) decode to the same request
    packed = zstandard.ZstdCompressor().compress(body)
    again = parse_forward_backward(decode_body(packed, "zstd", 1 << 20))
    assert again.loss_fn_config == req.loss_fn_config
    assert [d.tokens.tolist() for d in again.data] == [[1, 2, 3], [7, 8]]
    assert again.data[1].inputs["advantages"].tolist() == [1.0, -1.0]
    with pytest.raises(TinkerRequestError, match="larger than 10 bytes"):
        decode_body(packed, "zstd", 10)
    with pytest.raises(TinkerRequestError, match="not a ForwardBackwardRequest protobuf"):
        parse_forward_backward(b"\xff\xff\xff")


def test_forward_backward_output_decodes_in_the_client():
    outputs = [
        {"logprobs": np.array([-1.0, -2.0, -3.0], np.float32), "elementwise_loss": np.ones(3, np.float32)},
        {"logprobs": np.array([-0.5], np.float32), "elementwise_loss": np.zeros(1, np.float32)},
    ]
    out = deserialize_forward_backward_output(encode_forward_backward_output(outputs, {"loss:sum": 4.5}))
    assert out.metrics == {"loss:sum": 4.5}
    assert len(out.loss_fn_outputs) == 2
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == [-1.0, -2.0, -3.0]
    assert out.loss_fn_outputs[1]["logprobs"].tolist() == [-0.5]
    assert out.loss_fn_outputs[1]["elementwise_loss"].tolist() == [0.0]
    with pytest.raises(ValueError, match="name:reduction"):
        encode_forward_backward_output(outputs, {"loss": 1.0})


def test_sample_response_decodes_in_the_client():
    seqs = [
        EncodedSequence([5, 6, 2], [-0.1, -0.2, -0.3], stopped=True),
        EncodedSequence([7], None, stopped=False),
    ]
    res = deserialize_sample_response(encode_sample_response(seqs, [math.nan, -1.5, -2.5]))
    assert [s.tokens for s in res.sequences] == [[5, 6, 2], [7]]
    assert [s.stop_reason for s in res.sequences] == ["stop", "length"]
    assert res.sequences[0].logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert res.sequences[1].logprobs is None
    assert res.prompt_logprobs == [None, -1.5, -2.5]


def test_target_prompt_ids_dense_and_sparse():
    dense = decode_target_prompt_ids({"data": [1, -1, 2, 3], "dtype": "int64", "shape": [2, 2]}, 2, 10, 4)
    assert dense.ids.tolist() == [[1, -1], [2, 3]] and dense.crow is None
    sparse_json = {
        "data": [7, 8],
        "dtype": "int64",
        "shape": [3, 2],
        "sparse_crow_indices": [0, 1, 1, 2],
        "sparse_col_indices": [1, 0],
    }
    sparse = decode_target_prompt_ids(sparse_json, 3, 10, 4)
    assert sparse.ids.tolist() == [[-1, 7], [-1, -1], [8, -1]]  # left-out cells ask nothing
    values = np.array([[0.0, -0.5], [0.0, 0.0], [-1.5, 0.0]], np.float32)
    res = deserialize_sample_response(encode_sample_response([], None, target_prompt=(values, sparse)))
    out = res.target_prompt_logprobs
    assert out.sparse_crow_indices == [0, 1, 1, 2] and out.sparse_col_indices == [1, 0]
    assert list(out.data) == [-0.5, -1.5] and out.to_numpy().tolist() == values.tolist()
    alt = (np.array([[3, 4]], np.int64), np.array([[-0.25, -2.0]], np.float32))
    res = deserialize_sample_response(encode_sample_response([], None, alt_tokens=alt))
    assert res.prompt_alt_tokens.tokens.to_numpy().tolist() == [[3, 4]]
    assert res.prompt_alt_tokens.logprobs.to_numpy().tolist() == [[-0.25, -2.0]]


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ({"data": [1.0, 2.0], "dtype": "float32", "shape": [2, 1]}, "must be an int64 tensor"),
        ({"data": [1, 2], "dtype": "int64", "shape": [2]}, "must be 2-D"),
        (
            {"data": [1, 2, 3], "dtype": "int64", "shape": [3, 1]},
            "has 3 rows; the prompt has 3 tokens, so it needs 2",
        ),
        ({"data": [1, 99], "dtype": "int64", "shape": [2, 1]}, r"token ids must be in \[0, 10\) or -1"),
        ({"data": [1, -2], "dtype": "int64", "shape": [2, 1]}, "or -1"),
        ({"data": [1], "dtype": "int64", "shape": [2, 1]}, "1 values do not fill the shape"),
        ({"data": [0] * 10, "dtype": "int64", "shape": [2, 5]}, "more than this server's max_topk_logprobs"),
        ({"data": [1], "dtype": "int64", "shape": [2, 1], "sparse_crow_indices": [0, 1, 1]}, "needs both"),
        (
            {
                "data": [1],
                "dtype": "int64",
                "shape": [2, 1],
                "sparse_crow_indices": [0, 2, 1],
                "sparse_col_indices": [0],
            },
            "non-decreasing",
        ),
        (
            {
                "data": [1],
                "dtype": "int64",
                "shape": [2, 1],
                "sparse_crow_indices": [0, 1, 1],
                "sparse_col_indices": [3],
            },
            "one column in",
        ),
        ({"data": [True, 1], "dtype": "int64", "shape": [2, 1]}, "integer token ids"),
        ("ids", "a TensorData object"),
    ],
)
def test_bad_target_prompt_ids_name_what_is_wrong(obj, match):
    with pytest.raises(TinkerRequestError, match=match):
        decode_target_prompt_ids(obj, 2, 10, 4)


def test_json_model_input():
    mi = types.ModelInput.from_ints([1, 2]).append_int(3)
    assert model_input_tokens(mi.model_dump(mode="json")) == [1, 2, 3]
    with pytest.raises(TinkerRequestError, match="'image' is not supported"):
        model_input_tokens({"chunks": [{"type": "image", "data": "", "format": "png"}]})


def test_outputs_with_several_targets_per_position_keep_their_shape():
    outputs = [
        {"logprobs": np.arange(6, dtype=np.float32).reshape(3, 2)},
        {"logprobs": np.arange(2, dtype=np.float32).reshape(1, 2)},
        {"logprobs": np.array([-1.0, -2.0], np.float32)},  # a 1-D datum after 2-D ones
    ]
    out = deserialize_forward_backward_output(encode_forward_backward_output(outputs, {"loss:sum": 0.0}))
    assert [o["logprobs"].shape for o in out.loss_fn_outputs] == [[3, 2], [1, 2], [2]]
    assert out.loss_fn_outputs[0]["logprobs"].to_numpy().tolist() == [[0, 1], [2, 3], [4, 5]]
    assert out.loss_fn_outputs[2]["logprobs"].tolist() == [-1.0, -2.0]
