"""The model work behind the routes: forward/backward with a Tinker loss, the AdamW step and
sampling. Each function runs on the worker thread and returns what the client receives."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from integrations.tinker._models import TrainingModel
from integrations.tinker._requests import SampleBody, SamplingParamsBody
from integrations.tinker._wire import (
    EncodedSequence,
    FwdBwdRequest,
    TargetPromptIds,
    WireDatum,
    decode_target_prompt_ids,
    encode_forward_backward_output,
    encode_sample_response,
)
from integrations.tinker.losses import LossInputs, check_loss_request, required_inputs, tinker_loss
from integrations.tinker.types import TinkerRequestError, TinkerServerConfig
from skyrl_agent.policies.hf import HFPolicy
from skyrl_agent.types import GREEDY_BELOW, FinishReason, GenerateOutput, GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError
from trainers.logprobs import token_logprobs_from_logits

__all__ = [
    "forward_backward",
    "optim_step",
    "sample",
    "check_sample_request",
    "context_length",
    "generate_checked",
]

_FLOAT_INPUTS = ("weights", "logprobs", "advantages")


def _loss_inputs(loss_fn: str, datum: WireDatum, index: int, vocab: int, device: torch.device) -> LossInputs:
    needed = required_inputs(loss_fn)
    have = set(datum.inputs)
    missing = [k for k in needed if k not in have]
    extra = sorted(have - set(needed))
    if missing or extra:
        raise TinkerRequestError(
            f"datum {index}: {loss_fn} takes loss_fn_inputs {list(needed)}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {extra}" if extra else "")
        )
    target_shape = datum.inputs["target_tokens"].shape
    for k in needed:
        shape = datum.inputs[k].shape
        if loss_fn != "cross_entropy" and len(shape) != 1:
            raise TinkerRequestError(
                f"datum {index}: {loss_fn} takes one target per position, but loss_fn_inputs[{k!r}] has "
                f"shape {list(shape)}"
            )
        if shape != target_shape:
            raise TinkerRequestError(
                f"datum {index}: loss_fn_inputs[{k!r}] has shape {list(shape)} but target_tokens has "
                f"{list(target_shape)}"
            )
    raw_targets = datum.inputs["target_tokens"]
    if not np.issubdtype(raw_targets.dtype, np.integer):
        raise TinkerRequestError(f"datum {index}: loss_fn_inputs['target_tokens'] must be int64 token ids")
    targets = raw_targets.astype(np.int64)
    if targets.min() < 0 or targets.max() >= vocab:
        raise TinkerRequestError(
            f"datum {index}: loss_fn_inputs['target_tokens'] out of the vocabulary range [0, {vocab})"
        )
    fields: dict[str, torch.Tensor] = {"target_tokens_N": torch.as_tensor(targets, device=device)}
    for k in _FLOAT_INPUTS:
        if k in datum.inputs:
            arr = datum.inputs[k].astype(np.float32)
            if not np.isfinite(arr).all():
                raise TinkerRequestError(f"datum {index}: loss_fn_inputs[{k!r}] holds NaN or infinity")
            fields[f"{k}_N"] = torch.as_tensor(arr, device=device)
    return LossInputs(**fields)


def _target_logprobs(
    module: Any, tokens: Sequence[np.ndarray], targets: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Per datum, ``log p(target[i] | tokens[: i + 1])`` (float32, with gradient if enabled), of
    shape ``[N]``, or ``[N, K]`` for ``K`` targets per position."""
    device = targets[0].device
    B, T = len(tokens), max(t.size for t in tokens)
    K = max(1 if t.dim() == 1 else t.shape[1] for t in targets)
    ids_BT = torch.zeros((B, T), dtype=torch.long, device=device)
    attn_BT = torch.zeros((B, T), dtype=torch.long, device=device)
    tgt_BTK = torch.zeros((B, T, K), dtype=torch.long, device=device)
    for i, (tok, tgt) in enumerate(zip(tokens, targets, strict=True)):  # right padding
        ids_BT[i, : tok.size] = torch.as_tensor(tok, device=device)
        attn_BT[i, : tok.size] = 1
        tgt_BTK[i, : tok.size, : (1 if tgt.dim() == 1 else tgt.shape[1])] = tgt.reshape(tok.size, -1)
    logits_BTV = module(input_ids=ids_BT, attention_mask=attn_BT).logits  # B x T x V
    # one chunked gather per target column: never a B x T x V float32 log-softmax
    lp_BTK = torch.stack([token_logprobs_from_logits(logits_BTV, tgt_BTK[..., k]) for k in range(K)], dim=-1)
    return [
        lp_BTK[i, : tok.size, 0] if tgt.dim() == 1 else lp_BTK[i, : tok.size, : tgt.shape[1]]
        for i, (tok, tgt) in enumerate(zip(tokens, targets, strict=True))
    ]


def forward_backward(
    tm: TrainingModel,
    req: FwdBwdRequest,
    micro_batch_size: int,
    between: Callable[[], None] | None = None,
) -> bytes:
    """Run ``req`` (gradients accumulate until :func:`optim_step`); a ``ForwardBackwardOutput``.
    ``between`` is called between micro-batches (the scheduler lets other tenants' jobs run)."""
    check_loss_request(req.loss_fn, req.loss_fn_config)
    if not req.data:
        raise TinkerRequestError("forward_backward got no datums")
    device = next(iter(tm.params.values())).device
    vocab = _vocab_size(tm.base.model)
    context = context_length(tm.base.model)
    for i, d in enumerate(req.data):
        if int(d.tokens.max()) >= vocab:
            raise TinkerRequestError(
                f"datum {i}: model_input token id {int(d.tokens.max())} is out of the vocabulary range "
                f"[0, {vocab}); tokenize with this model's tokenizer"
            )
        if context is not None and d.tokens.size > context:
            raise TinkerRequestError(
                f"datum {i}: model_input has {d.tokens.size} tokens, more than the model's context of "
                f"{context}; send shorter sequences"
            )
    inputs = [_loss_inputs(req.loss_fn, d, i, vocab, device) for i, d in enumerate(req.data)]
    outputs: list[dict[str, np.ndarray]] = []
    total = 0.0
    for start in range(0, len(req.data), micro_batch_size):
        if start and between is not None:
            between()  # no autograd graph is alive here: the last micro-batch's backward ran
        sl = slice(start, start + micro_batch_size)
        with torch.set_grad_enabled(not req.forward_only):
            rows = _target_logprobs(
                tm.module, [d.tokens for d in req.data[sl]], [x.target_tokens_N for x in inputs[sl]]
            )
            result = tinker_loss(req.loss_fn, rows, inputs[sl], req.loss_fn_config)
            if not req.forward_only and result.loss.requires_grad:
                result.loss.backward()  # a sum: micro-batches add up to the request's gradient
        total += float(result.loss.detach())
        for lp_N, el_N in zip(rows, result.elementwise_N, strict=True):
            outputs.append(
                {
                    "logprobs": lp_N.detach().float().cpu().numpy(),
                    "elementwise_loss": el_N.float().cpu().numpy(),
                }
            )
    return encode_forward_backward_output(outputs, {"loss:sum": total})


def optim_step(tm: TrainingModel, adam: Mapping[str, float]) -> dict[str, Any]:
    """One AdamW step with ``adam`` on the accumulated gradients, which are then cleared."""
    for group in tm.optimizer.param_groups:
        group.update(
            lr=adam["learning_rate"],
            betas=(adam["beta1"], adam["beta2"]),
            eps=adam["eps"],
            weight_decay=adam["weight_decay"],
        )
    params = list(tm.params.values())
    grads = [p.grad for p in params if p.grad is not None]
    if adam["grad_clip_norm"] > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(params, adam["grad_clip_norm"]))
    else:
        norm = (
            float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads]))) if grads else 0.0
        )
    if not math.isfinite(norm):
        tm.optimizer.zero_grad(set_to_none=True)
        raise TinkerRequestError("the gradient is not finite (NaN or infinity); the step was skipped")
    tm.optimizer.step()
    tm.optimizer.zero_grad(set_to_none=True)
    tm.steps += 1
    return {"metrics": {"grad_norm:mean": norm, "learning_rate:mean": adam["learning_rate"]}}


def _vocab_size(model: Any) -> int:
    """Token ids ``model`` takes as input and gives logits for."""
    return min(
        int(model.get_input_embeddings().weight.shape[0]), int(model.get_output_embeddings().weight.shape[0])
    )


def context_length(model: Any) -> int | None:
    """The most positions ``model`` takes (prompt plus new tokens), or None if its config says not."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _sampling_params(
    params: SamplingParamsBody, max_tokens: int, vocab: int, seed: int | None
) -> tuple[SamplingParams, bool]:
    """Our :class:`SamplingParams` for Tinker's (``max_tokens`` already capped), and whether the
    end-of-sequence token stops."""
    stop = params.stop
    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    eos = stop is None or stop != []
    if isinstance(stop, str):
        strings = (stop,)
    elif stop and isinstance(stop[0], str):
        strings = tuple(s for s in stop if isinstance(s, str))
    elif stop:
        token_ids = tuple(t for t in stop if isinstance(t, int))
    top_k = params.top_k
    try:
        sp = SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0 if top_k <= 0 else min(top_k, vocab),
            max_tokens=max_tokens,
            stop=strings,
            stop_token_ids=token_ids,
            seed=seed,
        )
    except ValueError as exc:
        raise TinkerRequestError(f"invalid sampling_params: {exc}") from None
    return sp, eos


def _max_new_tokens(
    requested: int | None, prompt_len: int, context: int | None, config: TinkerServerConfig
) -> int:
    """``requested`` (or the server's default) capped at ``max_sample_tokens`` and at the room the
    model's context leaves after the prompt."""
    wanted = requested if requested is not None else config.default_max_tokens
    cap = config.max_sample_tokens
    if context is not None:
        if prompt_len >= context:
            raise TinkerRequestError(
                f"the prompt has {prompt_len} tokens but the model's context holds {context}; "
                "send a shorter prompt"
            )
        cap = min(cap, context - prompt_len)
    return max(1, min(wanted, cap))


#: The value of an empty top-k cell (the client's ``MASK_LOGPROB``), with token id 0.
_TOPK_EMPTY = -99999.0


@dataclass(frozen=True)
class _PromptScores:
    """What one forward pass over the prompt gives a sample request."""

    logprobs: list[float]
    """Prompt logprobs, NaN before the first scored position."""
    topk: tuple[np.ndarray, np.ndarray] | None = None
    """``topk_prompt_logprobs``: ids ``[P, k]`` int32 and logprobs float32 (empty cells before
    the first scored position)."""
    targets: np.ndarray | None = None
    """``target_prompt_logprobs``: float32 ``[P-1, K]``, 0 where nothing was asked."""
    alt: tuple[np.ndarray, np.ndarray] | None = None
    """``prompt_alt_tokens``: ids ``[P-1, k]`` int64 and their logprobs float32."""


def _prompt_scores(
    policy: HFPolicy,
    prompt: Sequence[int],
    first: int,
    k: int,
    *,
    targets: TargetPromptIds | None = None,
    alt_k: int = 0,
    temperature: float = 1.0,
    seed: int | None = None,
) -> _PromptScores:
    """One forward pass over the prompt: logprobs of prompt tokens from position ``first`` (at
    least 1) on, the top-``k`` next tokens there, the logprobs of the ``targets`` ids, and
    ``alt_k`` draws at ``temperature`` at every position after the first. Every logprob is the
    model's raw one (temperature 1), as for sampled tokens."""
    P = len(prompt)
    ids_1P = torch.as_tensor([list(prompt)], dtype=torch.long, device=policy.device)
    top_ids = top_lps = target_lps = alt_ids = alt_lps = None
    if k > 0:
        top_ids = np.zeros((P, k), dtype=np.int32)
        top_lps = np.full((P, k), _TOPK_EMPTY, dtype=np.float32)
    if targets is not None:
        target_lps = np.zeros(targets.ids.shape, dtype=np.float32)
    generator = None
    if alt_k > 0:
        alt_ids = np.zeros((P - 1, alt_k), dtype=np.int64)
        alt_lps = np.zeros((P - 1, alt_k), dtype=np.float32)
        generator = torch.Generator(device=policy.device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
    with torch.inference_mode():
        logits_PV = policy.model(input_ids=ids_1P, attention_mask=torch.ones_like(ids_1P)).logits[0]
        logits_RV = logits_PV[: P - 1]  # R = P - 1 rows: row r predicts prompt token r + 1
        # S = P - first rows, from the first scored position on (prompt_logprobs_last_n: few)
        lp_S = token_logprobs_from_logits(logits_RV[first - 1 :][None], ids_1P[:, first:])[0]  # S
        lps = [float("nan")] * first + lp_S.tolist()
        per_row = k > 0 or targets is not None or alt_k > 0
        for start in range(0, P - 1 if per_row else 0, 256):  # 256 rows of V float32 at a time
            rows = slice(start, min(start + 256, P - 1))
            chunk_CV = torch.log_softmax(logits_RV[rows].float(), dim=-1)
            if k > 0 and rows.stop > first - 1:
                skip = max(0, first - 1 - start)  # rows before the first scored position
                values_CK, index_CK = chunk_CV[skip:].topk(min(k, chunk_CV.shape[-1]), dim=-1)
                out = slice(start + skip + 1, rows.stop + 1)  # prompt positions these rows score
                top_ids[out, : index_CK.shape[1]] = index_CK.cpu().numpy()
                top_lps[out, : values_CK.shape[1]] = values_CK.cpu().numpy()
            if targets is not None:
                want_CK = torch.as_tensor(targets.ids[rows], device=chunk_CV.device)  # C x K, -1 = none
                got_CK = chunk_CV.gather(-1, want_CK.clamp(min=0))  # C x K
                target_lps[rows] = torch.where(want_CK >= 0, got_CK, 0.0).cpu().numpy()
            if alt_k > 0:
                if temperature < GREEDY_BELOW:
                    draws_Ck = chunk_CV.argmax(-1, keepdim=True).expand(-1, alt_k)
                else:
                    probs_CV = torch.softmax(chunk_CV / temperature, dim=-1)
                    draws_Ck = torch.multinomial(probs_CV, alt_k, replacement=True, generator=generator)
                alt_ids[rows] = draws_Ck.cpu().numpy()
                alt_lps[rows] = chunk_CV.gather(-1, draws_Ck).cpu().numpy()
    return _PromptScores(
        lps,
        topk=(top_ids, top_lps) if k > 0 else None,
        targets=target_lps,
        alt=(alt_ids, alt_lps) if alt_k > 0 else None,
    )


def _topk_rows(
    rows: Sequence[Sequence[tuple[int, float]]] | None, n: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The engine's top logprobs of ``n`` sampled tokens as ``[n, k]`` arrays (empty cells where a
    row has fewer than ``k``)."""
    ids = np.zeros((n, k), dtype=np.int32)
    lps = np.full((n, k), _TOPK_EMPTY, dtype=np.float32)
    for i, row in enumerate((rows or [])[:n]):
        for j, (tok, lp) in enumerate(row[:k]):
            ids[i, j], lps[i, j] = tok, lp
    return ids, lps


def check_sample_request(body: SampleBody, config: TinkerServerConfig) -> None:
    """Raise :class:`TinkerRequestError` for sampling features this server does not have or
    limits it does not allow."""
    if body.record_stability_info:
        raise TinkerRequestError("record_stability_info (StableReinforce) is not supported by this server")
    if body.prompt_logprobs_last_n is not None and not body.prompt_logprobs:
        raise TinkerRequestError("prompt_logprobs_last_n needs prompt_logprobs")
    for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
        if getattr(body, key) > config.max_topk_logprobs:
            raise TinkerRequestError(
                f"{key} {getattr(body, key)} is more than this server's max_topk_logprobs "
                f"({config.max_topk_logprobs}); ask for fewer"
            )


#: How often a sampling job waiting on the engine checks its limits (time, polls, session).
_CHECK_EVERY_S = 0.05


def generate_checked(
    policy: HFPolicy, requests: list[GenerateRequest], checkpoint: Callable[[], None] | None
) -> list[GenerateOutput]:
    """``requests`` through the policy's engine (continuous batching, KV reused across calls that
    extend an earlier prompt and its sample, the lean decode step), waiting in this thread and
    calling ``checkpoint`` between waits: when it raises (the job's time limit, an abandoned
    future, a closed session), the rows are dropped and its error goes up."""
    futures = policy.submit(requests)
    try:
        while concurrent.futures.wait(futures, timeout=_CHECK_EVERY_S).not_done:
            if checkpoint is not None:
                checkpoint()
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    return [fut.result() for fut in futures]


def sample(
    policy: HFPolicy,
    body: SampleBody,
    config: TinkerServerConfig,
    checkpoint: Callable[[], None] | None = None,
) -> bytes:
    """``num_samples`` continuations of the prompt (and its logprobs when asked); a ``SampleResponse``."""
    prompt = body.prompt.tokens()
    if not prompt:
        raise TinkerRequestError("the prompt is empty: send at least one token in prompt.chunks")
    vocab = _vocab_size(policy.model)
    if max(prompt) >= vocab:
        raise TinkerRequestError(
            f"prompt token id {max(prompt)} is out of the vocabulary range [0, {vocab}); tokenize with "
            "this model's tokenizer"
        )
    last_n = body.prompt_logprobs_last_n
    if last_n is not None and not 1 <= last_n <= len(prompt) - 1:
        raise TinkerRequestError(f"prompt_logprobs_last_n must be in [1, {len(prompt) - 1}], got {last_n!r}")
    params = body.sampling_params
    max_tokens = _max_new_tokens(params.max_tokens, len(prompt), context_length(policy.model), config)
    seed = params.seed
    requests = []
    for i in range(body.num_samples):
        sample_seed = None if seed is None else (seed + i) % 2**64
        sp, eos = _sampling_params(params, max_tokens, vocab, sample_seed)
        if body.topk_sample_logprobs > 0:
            sp = dataclasses.replace(sp, top_logprobs=min(body.topk_sample_logprobs, vocab))
        if not eos:  # stop=[]: nothing stops generation before max_tokens, not even end-of-sequence
            sp = dataclasses.replace(sp, ignore_eos=True)
        requests.append(GenerateRequest(prompt_ids=list(prompt), sampling=sp))
    try:
        outs = generate_checked(policy, requests, checkpoint)
    except ConfigError as exc:  # the policy's own checks of a request: the request is at fault
        raise TinkerRequestError(f"invalid sampling request: {exc}") from None
    n_top = min(body.topk_sample_logprobs, vocab)
    sequences = [
        EncodedSequence(
            o.token_ids,
            o.logprobs,
            o.finish_reason == FinishReason.STOP,
            topk=_topk_rows(o.top_logprobs, len(o.token_ids), n_top) if n_top > 0 else None,
        )
        for o in outs
    ]
    k = body.topk_prompt_logprobs
    targets = None
    if body.target_prompt_logprobs is not None:
        targets = decode_target_prompt_ids(
            body.target_prompt_logprobs, len(prompt) - 1, vocab, config.max_topk_logprobs
        )
    alt_k = body.prompt_alt_tokens_k
    if not (body.prompt_logprobs or k > 0 or targets is not None or alt_k > 0):
        return encode_sample_response(sequences, None)
    first = 1 if last_n is None else len(prompt) - last_n
    scores = _prompt_scores(
        policy,
        prompt,
        first,
        min(k, vocab),
        targets=targets,
        alt_k=alt_k,
        temperature=params.temperature,
        seed=seed,
    )
    return encode_sample_response(
        sequences,
        scores.logprobs if body.prompt_logprobs else None,
        scores.topk,
        target_prompt=None if targets is None else (scores.targets, targets),
        alt_tokens=scores.alt,
    )
