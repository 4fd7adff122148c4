"""The configuration of a training run: one frozen dataclass, every field a ``skyrl train`` flag.

The closed algorithm choices (``advantage``, ``loss``, ``reduction``, ``kl_estimator``) are the
values of the enums in :mod:`trainers.types` (``Literal[*Enum]``), and the loss hyperparameters
default to :class:`~trainers.types.PolicyLossConfig`'s, so the flags cannot drift from what the
losses accept. :attr:`TrainConfig.loss_config` and :attr:`TrainConfig.kl_config` are what the
training step hands to the losses."""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from skyrl_gym.config import parse_env_config
from skyrl_gym.errors import ConfigError
from trainers.types import (
    AdvantageEstimator,
    KLConfig,
    KLEstimator,
    LossReduction,
    PolicyLossConfig,
    PolicyLossType,
    parse_choice,
)

__all__ = ["TrainConfig", "parse_env_config", "read_flags", "config_from_flags"]


@dataclass(frozen=True)
class TrainConfig:
    """A GRPO/PPO run: data, model, rollouts, algorithm, optimizer, evaluation and bookkeeping.

    The defaults are the main job: the bundled SmolLM2-135M-Instruct learning the two-turn
    ``calculator`` tool-use task on CPU (about 8 minutes on two AVX512-BF16 cores; see the README's headline figures)."""

    # ---------------------------------------------------------------- task and data
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
    data: str | None = None
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
    # ---------------------------------------------------------------- model
    model: str = "smollm2-135m"
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
    training model itself, adapters applied on every forward."""
    bf16: bool | None = None
    """bf16 autocast for generation and training. None (auto): on where the device computes bf16
    natively (CUDA; a CPU with AVX512-BF16 or AMX), off elsewhere: on an AVX2-only CPU bf16 is
    emulated and several times slower than float32 (``skyrl_agent.models.bf16_is_native``)."""
    # ---------------------------------------------------------------- rollouts
    steps: int = 12
    """Training steps (each: one batch of groups, one or more optimizer updates)."""
    prompts_per_step: int = 8
    """Prompts per step. The main job's 8 (x ``group_size`` 8): every step has each of its four
    question shapes (most steps two of each), so a habit that one shape's groups reward meets the
    other shapes' groups in the same update: five seeds ended at held-out success 0.92-0.98; with
    4, 5 of 7 runs ended at 0.9 or more and the other two each lost most of one shape
    (``results/main-job/main-job-p8-2026-12-05.txt``)."""
    group_size: int = 8
    """Samples per prompt (the GRPO group)."""
    temperature: float = 0.8
    """Sampling temperature for training and evaluation rollouts."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    max_turns: int = 2
    """Most policy turns per episode."""
    max_tokens_per_turn: int = 40
    """Most new tokens per turn."""
    max_context_tokens: int = 2048
    """Most tokens per episode, prompt included."""
    stop: tuple[str, ...] = ("</tool_call>", "</answer>")
    """Stop strings that end a turn early (kept in the output)."""
    observation_style: Literal["messages", "inline"] = "messages"
    """Observations as their own chat messages, or appended inside the assistant message."""
    concurrency: int = 64
    """Most episodes in flight at once."""
    # ---------------------------------------------------------------- algorithm
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
    in asynchronous mode, where it also corrects for staleness)."""
    tis_cap: float = PolicyLossConfig.tis_cap
    """Truncated importance sampling: the upper bound of the weight ``exp(old - rollout)``."""
    skip_equal_reward_groups: bool = True
    """Leave out groups whose samples all got the same reward (they carry no GRPO signal)."""
    count_flat_groups: bool = False
    """With ``skip_equal_reward_groups``: the groups left out still count in the loss's mean (their
    tokens, sequences or groups, as ``reduction`` counts), so the update is the one that training
    them with their zero advantages would give (exactly so while ``kl_coef`` and ``entropy_coef``
    are 0), without their forward and backward: a step where one group of four carries signal
    moves the weights about a quarter as far. False: the mean over the informative groups alone,
    a full-size step however few they are. Not used with ``dynamic_sampling`` (which fills the
    batch with informative groups instead) or ``advantage="gae"`` (a critic's advantages are not
    zero in an equal-reward group)."""
    step_wise: bool = False
    """Train one sample per turn (its own prompt: everything the model saw before it), each with
    its episode's advantage, instead of one sample per episode. For agents whose history is not
    append-only; episodes whose context was rewritten (``context_strategy``) are always trained
    one sample per stretch. Needs an outcome advantage (not ``gae``)."""
    context_strategy: Literal["stop", "drop_observations", "summarize"] = "stop"
    """When the next observation and a full turn would not fit in ``max_context_tokens``: stop the
    episode, drop the oldest observations beyond ``keep_observations``, or call the env's
    ``summarize_history`` hook; see :mod:`skyrl_agent.context`."""
    keep_observations: int = 2
    """``drop_observations``: the most recent observations kept in full."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling (Yu et al. 2025): when groups are left out as equal-reward, keep
    sampling new prompts until the step has ``prompts_per_step`` informative groups (or
    ``max_sampling_rounds`` ran out), so every update sees a full batch. Needs
    ``skip_equal_reward_groups``."""
    max_sampling_rounds: int = 4
    """Dynamic sampling: at most this many rollout rounds per step (the first one included); the
    step trains on what it has when they run out. The metric ``sampling_rounds`` counts them."""
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
    # ---------------------------------------------------------------- optimizer
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
    fused_head: bool = True
    """Run the LM head only at positions that predict a trained token, fused with the
    log-softmax, in chunks (same losses and gradients; False: full logits, the reference path)."""
    sampler_cascade_min_tokens: int = 64
    """The sampler's ``EngineConfig.cascade_min_tokens``: above 0, rows under a shared prompt
    prefix of at least this many tokens read one copy of its KV in decode steps (CPU under bf16
    autocast; decision 0025). 0: off (every row reads its own copy)."""
    sampler_max_rows: int = 64
    """Most rows the sampler decodes at once (raised to ``prompts_per_step * group_size`` when
    that is more): the evaluations' episodes share decode steps. The main job's evaluation (256
    episodes, 2 cores, bf16): 72.9 s with 32 rows, 64.0 s with 64, 72.6 s with 128
    (``bench/bench_generation.py --sections 1 --variants engine rows-64-cascade rows-128-cascade``)."""
    # ---------------------------------------------------------------- scale-out and overlap
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
    # ---------------------------------------------------------------- bookkeeping
    run_dir: str = "runs/calculator"
    """Where metrics, trajectories, checkpoints and plots go."""
    checkpoint_every: int = 5
    """Save a checkpoint every N steps (and at the end)."""
    keep_checkpoints: int = 2
    """How many checkpoints to keep."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir."""
    seed: int = 0
    """Seed for data order, sampling and initialization."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    report_to: tuple[str, ...] = ("tensorboard",)
    """Experiment trackers besides ``metrics.jsonl``: any of ``tensorboard``, ``wandb``,
    ``mlflow`` (space- or comma-separated; none for none). See :mod:`trainers.trackers`."""
    progress: bool = True
    """Print a progress line per step."""

    def __post_init__(self) -> None:
        positive = (
            "steps",
            "prompts_per_step",
            "group_size",
            "max_turns",
            "max_tokens_per_turn",
            "micro_batch_size",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.release_memory_above < 0:
            raise ConfigError(
                f"TrainConfig.release_memory_above must be >= 0 (0: always, 1: never), got {self.release_memory_above}"
            )
        if self.micro_batch_tokens < 0:
            raise ConfigError(
                f"TrainConfig.micro_batch_tokens must be >= 0 (0: no token bound), got {self.micro_batch_tokens}"
            )
        if self.updates_per_step < 1:
            raise ConfigError(f"updates_per_step must be >= 1, got {self.updates_per_step}")
        if self.temperature <= 0:
            raise ConfigError("temperature must be > 0 for RL rollouts (greedy samples give GRPO no signal)")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ConfigError(f"unknown lr_schedule {self.lr_schedule!r}; use constant, linear or cosine")
        if self.group_size < 2 and self.advantage in ("grpo", "dr_grpo", "rloo", "gigpo", "mt_grpo"):
            raise ConfigError(f"{self.advantage} needs group_size >= 2 (a baseline from the other samples)")
        if (self.step_wise or self.context_strategy != "stop") and self.advantage == "gae":
            raise ConfigError(
                "step-wise samples (step_wise, or a context_strategy that rewrites the history) take "
                "their episode's advantage, which needs an outcome estimator: use grpo, dr_grpo, rloo "
                "or reinforce_pp, not gae"
            )
        if (self.step_wise or self.context_strategy != "stop") and self.advantage in ("gigpo", "mt_grpo"):
            raise ConfigError(
                f"{self.advantage} gives each turn of an append-only episode its own advantage; it runs "
                "neither with step_wise nor with a context_strategy that rewrites the history: drop "
                "--step-wise / use --context-strategy stop, or an outcome estimator (grpo, dr_grpo, rloo)"
            )
        if self.advantage in ("gigpo", "mt_grpo") and not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(
                f"{self.advantage} discounts turn returns by gamma, which must be in [0, 1], got {self.gamma}"
            )
        from skyrl_agent.types import check_context_strategy

        check_context_strategy(self.context_strategy, self.keep_observations, self.observation_style)
        if self.dynamic_sampling and not self.skip_equal_reward_groups:
            raise ConfigError(
                "dynamic_sampling replaces equal-reward groups with new ones, so it needs "
                "skip_equal_reward_groups on (drop --no-skip-equal-reward-groups)"
            )
        if self.max_sampling_rounds < 1:
            raise ConfigError(f"max_sampling_rounds must be >= 1, got {self.max_sampling_rounds}")
        if not 0 <= self.overlong_buffer <= self.max_context_tokens:
            raise ConfigError(
                f"overlong_buffer must be in [0, max_context_tokens={self.max_context_tokens}], "
                f"got {self.overlong_buffer}"
            )
        if self.overlong_penalty < 0:
            raise ConfigError(
                f"overlong_penalty must be >= 0 (it is subtracted), got {self.overlong_penalty}"
            )
        if self.async_staleness < 0:
            raise ConfigError(f"async_staleness must be >= 0 (0: synchronous), got {self.async_staleness}")
        if self.sampler_max_rows < 1:
            raise ConfigError(f"sampler_max_rows must be >= 1, got {self.sampler_max_rows}")
        if self.sampler_cascade_min_tokens < 0:
            raise ConfigError(
                f"sampler_cascade_min_tokens must be >= 0 (0: off; 64 turns it on), got {self.sampler_cascade_min_tokens}"
            )
        if not 0 <= self.gae_lambda <= 1 or not 0 <= self.gamma <= 1:
            raise ConfigError(
                f"gamma and gae_lambda must be in [0, 1], got {self.gamma} and {self.gae_lambda}"
            )
        if self.value_coef < 0 or self.value_clip < 0:
            raise ConfigError("value_coef and value_clip must be >= 0")
        if self.lora_rank < 0 or not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_rank must be >= 0 and lora_dropout in [0, 1)")
        if isinstance(self.lora_target_modules, str):
            raise ConfigError(
                "lora_target_modules must be a tuple of module names, e.g. ('q_proj', 'v_proj')"
            )
        if isinstance(self.stop, str):
            raise ConfigError("stop must be a tuple of strings")
        if isinstance(self.imports, str):
            raise ConfigError(
                f"imports must be a tuple of module names, e.g. ({self.imports!r},); on the command "
                "line: --import MODULE, once per module"
            )
        names = tuple(n.strip() for item in self.report_to for n in str(item).split(",") if n.strip())
        object.__setattr__(self, "report_to", tuple(n for n in names if n != "none"))
        unknown = [n for n in self.report_to if n not in ("tensorboard", "wandb", "mlflow")]
        if unknown:
            raise ConfigError(
                f"unknown tracker(s) {unknown} in report_to; choose from tensorboard, wandb, mlflow"
            )
        parse_env_config(self.env_config)  # fail at once on a malformed item
        parse_choice(AdvantageEstimator, self.advantage)
        parse_choice(PolicyLossType, self.loss)
        _ = self.loss_config, self.kl_config  # fail at once on a bad loss or KL hyperparameter

    @property
    def loss_config(self) -> PolicyLossConfig:
        """The policy-loss hyperparameters: every :class:`PolicyLossConfig` field from the field
        of the same name here, except that truncated importance sampling is always on in
        asynchronous mode and ``norm_constant`` defaults to the longest generation."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(PolicyLossConfig)}
        values["truncated_is"] = self.truncated_is or self.async_staleness > 0
        if self.norm_constant is None:
            values["norm_constant"] = float(self.max_turns * self.max_tokens_per_turn)
        return PolicyLossConfig(**values)

    @property
    def kl_config(self) -> KLConfig:
        """The KL term's settings (a loss term; ``coef`` 0 turns it off)."""
        return KLConfig(estimator=self.kl_estimator, coef=self.kl_coef, clamp=self.kl_clamp)


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
