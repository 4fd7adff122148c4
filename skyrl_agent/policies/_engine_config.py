"""The engine's settings and counters (:mod:`skyrl_agent.policies._engine`)."""

from __future__ import annotations

from dataclasses import dataclass

from skyrl_gym.errors import ConfigError

__all__ = ["EngineConfig", "EngineStats"]


@dataclass(frozen=True)
class EngineConfig:
    """Settings of the continuous-batching engine."""

    max_rows: int = 32
    """Most rows decoding at once."""
    max_tokens_in_flight: int = 65536
    """Most tokens the running rows may hold: each row counts its prompt plus its ``max_tokens``
    (bounds the KV memory: about 46 KB a token for SmolLM2-135M in float32)."""
    prefix_cache_bytes: int = 2 << 30
    """Bytes of KV kept for reuse, least recently used out: finished rows' (for the next turn of
    an episode) and the prompts groups of rows started with (for later prompts that start the
    same way: one system prompt). 0 turns reuse off."""
    min_reuse_tokens: int = 16
    """Reuse a stored prefix only when it covers at least this many prompt tokens."""
    allow_stale_prefix: bool = False
    """Keep stored KV across weight updates (faster, slightly off-policy prefixes)."""
    min_shared_prefix: int = 16
    """Newcomers admitted together that share this many leading tokens prefill them once."""
    compact_every: int = 64
    """Drop leading columns no running row uses once there are this many."""
    admit_every: int = 4
    """While more than half of ``max_rows`` rows are running, newcomers join at most every this
    many decode steps, so that their prefill runs as one batch: each prefill is one more pass
    over the weights, and one-row prefills of the next turns cost most of their time in that
    pass. With fewer rows running they join at the next step. 1: at every step. Measured on
    the main job's untrained evaluation (2 cores, bf16, one run each): 121 s with 1, 111 s
    with 4 (prefill forwards 273 -> 160), 110 s with 8 or 16."""
    cascade_min_tokens: int = 64
    """When above 0: rows whose prompts start with the same prefix of at least this many tokens
    (a system prompt) keep one copy of its KV, which decode steps read once for all of them
    (cascade attention, :mod:`skyrl_agent.policies._cascade`). Applies where the engine decodes
    with its bf16 weight copy (CPU under bf16 autocast). It changes greedy tokens no more than
    the batch size does; on since 2026-12-05, when its attention stopped casting every row's
    keys up to float32 (the main job's evaluation 1.19x faster; decision 0025). 0: off."""
    memory_bytes: int = 0
    """One byte budget for the sampler's KV when above 0: the running rows' KV buffers (rows x
    the longest row's prompt plus ``max_tokens``, as the buffers are laid out), a prefill's
    newcomers' KV while it is moved into them, and the prefix store. Newcomers wait until they
    fit; the prefix store gives up its least recently used entries to make room; a request that
    cannot fit alone fails with an error that names the budget. 0: no byte budget
    (``max_tokens_in_flight`` and ``prefix_cache_bytes`` bound the two parts on their own)."""
    budget_name: str = "EngineConfig.memory_bytes"
    """How errors name the budget to the user (the trainer passes its flag)."""
    lean_decode_step: bool = True
    """Run decode steps of a plain ``LlamaForCausalLM`` (the bundled model's layout) through
    :class:`~skyrl_agent.policies._llama_step.LlamaDecodeStep`: the same operations on the same
    weights without transformers' module plumbing, logits bit for bit the same. Other models
    always decode through their forward."""

    def __post_init__(self) -> None:
        if self.max_rows < 1:
            raise ConfigError(f"max_rows must be >= 1, got {self.max_rows}")
        if self.max_tokens_in_flight < 2:
            raise ConfigError(f"max_tokens_in_flight must be >= 2, got {self.max_tokens_in_flight}")
        if self.prefix_cache_bytes < 0:
            raise ConfigError(f"prefix_cache_bytes must be >= 0, got {self.prefix_cache_bytes}")
        if self.memory_bytes < 0:
            raise ConfigError(f"memory_bytes must be >= 0 (0: no byte budget), got {self.memory_bytes}")
        if self.admit_every < 1:
            raise ConfigError(
                f"admit_every must be >= 1 (1: newcomers join at every step), got {self.admit_every}"
            )


@dataclass
class EngineStats:
    """Counters since the engine started (read them with :meth:`InferenceEngine.stats`)."""

    requests: int = 0
    """Requests finished (errors included)."""
    prompt_tokens: int = 0
    """Prompt tokens of those requests."""
    prefill_tokens: int = 0
    """Prompt tokens actually run through the model (the rest came from reuse or sharing)."""
    reused_tokens: int = 0
    """Prompt tokens whose KV came from the prefix store."""
    generated_tokens: int = 0
    """Tokens sampled."""
    decode_steps: int = 0
    """Batched decode forwards."""
    prefills: int = 0
    """Prefill forwards (each runs a batch of newcomers; see ``EngineConfig.admit_every``)."""
    rows_decoded: int = 0
    """Sum over decode steps of the rows in the step (mean batch = rows_decoded / decode_steps)."""
    store_evictions: int = 0
    """Prefix store entries evicted for room."""
    peak_rows: int = 0
    """Most rows running at once."""
    peak_tokens_in_flight: int = 0
    """Most budgeted tokens (prompt + max_tokens over the running rows) at once."""
    lean_refreshes: int = 0
    """Times the bf16 copy of the weights was brought up to the model's (see ``LeanCopy``)."""
    cascade_rows_decoded: int = 0
    """Sum over decode steps of the rows that read a shared prefix's single copy of KV."""
    cascade_columns_saved: int = 0
    """Sum over decode steps of the prefix columns those rows did not hold themselves."""
    cascade_prefill_rows: int = 0
    """Next turns prefilled over their own columns, the shared prefix read from its one copy."""
    prefix_store_bytes: int = 0
    """Bytes of KV the prefix store holds now (bounded by ``EngineConfig.prefix_cache_bytes``)."""
    peak_kv_bytes: int = 0
    """Most bytes of KV the running rows' buffers held at once (their allocated size)."""
    budget_waits: int = 0
    """Admissions that left a newcomer waiting because the byte budget was full
    (``EngineConfig.memory_bytes``)."""
    workers_released: int = 0
    """Times the engine's thread, going idle, had the OpenMP runtime release its workers (on
    CPU; counted also when it held none; see :mod:`skyrl_agent._openmp`)."""
