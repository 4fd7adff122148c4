"""Base models, training models (full or LoRA through peft) and sampling models.

Each base model is loaded once and kept pristine (eval mode, no gradients); a training model is a
deep copy of it, with LoRA adapters when asked; a sampling model is another copy with a
snapshot's weights loaded (LoRA adapters merged in, so sampling pays nothing for them).
"""

from __future__ import annotations

import copy
import logging
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from integrations.tinker.types import TINY_RANDOM_MODEL, LoraSpec, TinkerRequestError, TinkerServerConfig
from skyrl_agent.models import BUNDLED_MODEL, bundled_model_dir, pretrained_kwargs, tiny_random_model
from skyrl_agent.policies.hf import HFPolicy
from skyrl_gym.errors import require

__all__ = ["BaseModel", "BaseModels", "TrainingModel", "Snapshot", "SamplerModels", "build_training_model"]

log = logging.getLogger(__name__)


@dataclass
class BaseModel:
    """A loaded base model."""

    name: str
    """The name clients use."""
    model: Any
    """The pristine causal LM (eval mode, ``requires_grad`` off)."""
    tokenizer: Any
    """Its tokenizer."""
    tokenizer_dir: str
    """A local directory ``AutoTokenizer.from_pretrained`` loads it from (sent as ``tokenizer_id``)."""
    arch: str
    """The architecture class name."""


class BaseModels:
    """Loads each base model once, on first use. ``on_forward`` (if given) runs before every
    forward pass of the model and of every copy made of it (training and sampling models): the
    scheduler's hook that stops a sampling job past its limits."""

    def __init__(self, config: TinkerServerConfig, on_forward: Callable[[], None] | None = None) -> None:
        self.config = config
        self.on_forward = on_forward
        self._models: dict[str, BaseModel] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> BaseModel:
        """The base model ``name``: an alias from the config, ``smollm2-135m``, ``tiny-random``
        or a local model directory."""
        with self._lock:
            if name not in self._models:
                self._models[name] = self._load(name)
            return self._models[name]

    def _load(self, name: str) -> BaseModel:
        transformers: Any = require("transformers", "training", "the Tinker-compatible server")
        dtype = getattr(torch, self.config.dtype)
        if name == TINY_RANDOM_MODEL:
            model, tok = tiny_random_model()
            tok_dir = str(bundled_model_dir())
        else:
            path = self.config.alias(name)
            if path is None and name in (BUNDLED_MODEL, "bundled"):
                path = str(bundled_model_dir())
            if path is None and _is_dir(name):
                if not (Path(name) / "config.json").is_file():
                    raise TinkerRequestError(
                        f"base_model {name!r} is a directory with no model in it (no config.json): give a "
                        "directory saved with save_pretrained, or a model name this server knows"
                    )
                path = name
            if path is None:
                aliases = ", ".join(a for a, _ in self.config.model_aliases) or "none configured"
                raise TinkerRequestError(
                    f"unknown base model {name!r}: use {BUNDLED_MODEL!r}, {TINY_RANDOM_MODEL!r}, a local model "
                    f"directory, or a name mapped with `skyrl tinker serve --model NAME=PATH` (aliases: {aliases})"
                )
            try:
                tok = transformers.AutoTokenizer.from_pretrained(path)
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    path, dtype=dtype, **pretrained_kwargs(transformers)
                )
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                log.warning("base model %r (%s) failed to load", name, path, exc_info=exc)
                raise TinkerRequestError(
                    f"base_model {name!r} could not be loaded as a causal language model "
                    f"({type(exc).__name__}); check that it is a complete transformers model directory"
                ) from None
            tok_dir = path
        model = model.to(device=self.config.device, dtype=dtype).eval()
        model.requires_grad_(False)
        if self.on_forward is not None:
            hook = self.on_forward
            model.register_forward_pre_hook(lambda module, args: hook())
        return BaseModel(name, model, tok, tok_dir, type(model).__name__)


def _is_dir(name: str) -> bool:
    try:
        return Path(name).is_dir()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL byte
        return False


def _lora_targets(model: Any, spec: LoraSpec) -> list[str]:
    """Names of the linear layers that get adapters: attention, MLP and/or the output layer."""
    out_emb = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        last = name.rsplit(".", 1)[-1]
        if module is out_emb:
            if spec.train_unembed:
                names.append(name)
        elif "attn" in name or "attention" in name:
            if spec.train_attn:
                names.append(name)
        elif "mlp" in name or "feed_forward" in name or last in ("gate_proj", "up_proj", "down_proj"):
            if spec.train_mlp:
                names.append(name)
    if not names:
        raise TinkerRequestError(f"no linear layers match this lora_config for {type(model).__name__}")
    return names


def _with_lora(model: Any, spec: LoraSpec, seed: int) -> Any:
    peft: Any = require("peft", "training", "LoRA training models")
    cfg = peft.LoraConfig(
        r=spec.rank, lora_alpha=spec.alpha, lora_dropout=0.0, target_modules=_lora_targets(model, spec)
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # an adapter on a tied output layer changes only the output projection; the sampler
        # unties before merging (see _untie_output), so peft's warning about it does not apply
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        torch.manual_seed(spec.seed if spec.seed is not None else seed)
        return peft.get_peft_model(model, cfg)


def _untie_output(module: Any) -> None:
    """Give the output layer its own copy of a tied embedding matrix, so merging an adapter into
    it leaves the input embedding alone (as the unmerged adapter does)."""
    out, inp = module.get_output_embeddings(), module.get_input_embeddings()
    if out is not None and inp is not None and out.weight is inp.weight:
        out.weight = torch.nn.Parameter(inp.weight.detach().clone(), requires_grad=False)
        module.config.tie_word_embeddings = False


@dataclass
class TrainingModel:
    """A model being trained and its optimizer."""

    model_id: str
    base: BaseModel
    lora: LoraSpec | None
    """None for a full fine-tune."""
    module: Any
    """The trained module (a peft model for LoRA)."""
    params: dict[str, torch.Tensor]
    """The trained parameters by name, in a fixed order (the optimizer's)."""
    optimizer: torch.optim.Optimizer
    steps: int = 0
    """Optimizer steps taken."""
    snapshots: OrderedDict[str, Snapshot] = field(default_factory=OrderedDict)
    """Unnamed sampler snapshots in memory, oldest first."""

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the trained parameters."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.params.items()}

    def load_trainable(self, state: Mapping[str, torch.Tensor], source: str) -> None:
        """Copy ``state`` into the trained parameters; names and shapes must match exactly."""
        _copy_into(self.params, state, source)


def _copy_into(params: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], source: str) -> None:
    missing = [k for k in params if k not in state]
    extra = [k for k in state if k not in params]
    if missing or extra:
        raise TinkerRequestError(
            f"{source} does not fit this model: {len(missing)} parameters missing (e.g. {missing[:2]}), "
            f"{len(extra)} unexpected (e.g. {extra[:2]}); was it saved from the same base model and LoRA config?"
        )
    with torch.no_grad():
        for k, p in params.items():
            v = state[k]
            if tuple(v.shape) != tuple(p.shape):
                raise TinkerRequestError(
                    f"{source}: {k} has shape {tuple(v.shape)}, the model {tuple(p.shape)}"
                )
            p.copy_(v.to(p.device, p.dtype))


def build_training_model(
    model_id: str, base: BaseModel, lora: LoraSpec | None, config: TinkerServerConfig
) -> TrainingModel:
    """A fresh training model on ``base``: a copy, with LoRA adapters when ``lora`` is given."""
    module = copy.deepcopy(base.model)
    if lora is not None:
        module = _with_lora(module, lora, config.seed)
    else:
        module.requires_grad_(True)
    module.eval()  # no dropout: forward passes are deterministic
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW(
        list(params.values()), lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0
    )
    return TrainingModel(model_id, base, lora, module, params, optimizer)


@dataclass(frozen=True)
class Snapshot:
    """Fixed weights to sample from: a base model plus a training model's trained parameters."""

    key: str
    """Identity in the sampler cache."""
    base_name: str
    lora: LoraSpec | None
    weights: Mapping[str, torch.Tensor] | None
    """Trained parameters by name (CPU), or None for the base model itself."""
    model_path: str | None = None
    """The ``tinker://`` path it came from, if any."""

    @classmethod
    def of_base(cls, base_model: str) -> Snapshot:
        """Sampling from a base model as it is (no trained weights)."""
        return cls(f"base:{base_model}", base_model, None, None)


class SamplerModels:
    """Sampling policies built from snapshots, the ``capacity`` most recently used kept."""

    def __init__(self, base_models: BaseModels, config: TinkerServerConfig) -> None:
        self.base_models = base_models
        self.config = config
        self._cache: OrderedDict[str, HFPolicy] = OrderedDict()

    def policy(self, snap: Snapshot) -> HFPolicy:
        """An :class:`HFPolicy` over ``snap``'s weights."""
        if snap.key in self._cache:
            self._cache.move_to_end(snap.key)
            return self._cache[snap.key]
        base = self.base_models.get(snap.base_name)
        module = base.model if snap.weights is None else self._build(base, snap)
        # the continuous-batching engine: its own thread decodes while the job's thread waits
        # and checks the job's limits (integrations.tinker._ops.generate_checked)
        policy = HFPolicy(module, base.tokenizer, seed=self.config.seed, min_shared_prefix=16)
        self._cache[snap.key] = policy
        while len(self._cache) > self.config.sampler_cache_size:
            _, old = self._cache.popitem(last=False)
            old.close()
        return policy

    def _build(self, base: BaseModel, snap: Snapshot) -> Any:
        module = copy.deepcopy(base.model)
        if snap.lora is not None:
            if snap.lora.train_unembed:
                _untie_output(module)
            module = _with_lora(module, snap.lora, self.config.seed)
        params = {n: p for n, p in module.named_parameters() if snap.lora is None or "lora_" in n}
        _copy_into(params, snap.weights or {}, f"sampler weights {snap.model_path or snap.key}")
        if snap.lora is not None:
            module = module.merge_and_unload()
        module.requires_grad_(False)
        return module.eval()

    def drop(self, predicate: Callable[[str], bool]) -> None:
        """Forget cached policies whose key matches."""
        for key in [k for k in self._cache if predicate(k)]:
            self._cache.pop(key).close()

    def close(self) -> None:
        """Close every cached policy. Idempotent."""
        self.drop(lambda _: True)
