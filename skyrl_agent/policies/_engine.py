"""A continuous-batching inference engine over a transformers causal LM (CPU or CUDA).

One worker thread owns the model and runs a loop of scheduler steps:

1. **admit**: waiting requests join the running batch while it has room (``max_rows`` rows and
   ``max_tokens_in_flight`` tokens of context plus remaining new tokens). A newcomer is
   prefilled on its own KV cache, its first token is sampled from the prefill's logits, and its
   KV is copied into the running batch (``_Slots.insert``). Newcomers that arrive together
   (the samples of a GRPO group) are prefilled as one batch, their shared prefix once.
2. **reuse**: a newcomer whose prompt starts with the tokens of an earlier finished row (the
   next turn of an episode: its last prompt, its response, then the new observation) takes that
   row's KV from the :class:`PrefixStore` and prefills only the new tokens. The store keeps
   finished rows' KV under a byte bound with LRU eviction; a change of the weights empties it
   unless ``allow_stale_prefix`` is set. Changes are seen however they happen, before rows are
   admitted: ``update_weights``; a ``torch.optim`` optimizer stepping any of the engine's
   parameters (a global optimizer post-step hook; fused kernels such as ``AdamW(fused=True)`` do
   not bump the parameters' version counters, so those alone would miss the trainer's steps);
   :meth:`InferenceEngine.weights_changed` for any other in-place change; and the parameters'
   version counters (plain in-place ops). With ``allow_stale_prefix`` reused KV may come from
   older weights: the logprobs are still those the sampler computed, so the trainer's TIS
   correction sees what was sampled.
3. **decode**: one forward step for every running row; each row samples its next token with its
   own generator; finished rows leave at once (their KV goes to the store).

KV layout (``_Slots``): per layer one key and one value buffer ``[rows, kv_heads, length,
head_dim]``. The running rows are rows ``0..B-1``, and every row's newest token sits in the same
column ``t - 1`` (rows are left-padded), so a decode step writes column ``t`` of all rows at once
and attends to columns ``[0, t]`` through a mask that hides each row's padding. Nothing is
concatenated per step (a growing ``DynamicCache`` copies the whole cache every token); rows
leave by moving the last row into the freed one, and leading columns that no row uses are
dropped when they add up.

Shared prefix (opt-in, ``cascade_min_tokens``, :mod:`skyrl_agent.policies._cascade`): when the engine
decodes with its bf16 weight copy, the KV of a prefix that newcomers share (a system prompt,
from a group prefill or the store) is kept once as a :class:`SharedPrefix`. Rows that start with
it drop those columns from their buffer rows (a row already running adopts it too) and decode
steps read the single copy; a finished row's stored KV gets the prefix's columns back in front.
A new prefix replaces the current one only when no running row reads it; a weight change drops
it.

Logprobs are exact: each sampled token's logprob is ``log_softmax`` of the logits the engine
computed for it (temperature 1, before filters), the quantity the trainer's importance ratio
needs; ``tests/agent/test_engine_policy.py`` compares them with a full forward pass. A prefix
taken from the store was computed in another pass (other shapes, so other float rounding): a
row's logprobs then agree with a run without reuse to about 1e-6, not bit for bit, and a sampled
token can in rare cases differ; set ``prefix_cache_bytes=0`` where runs must repeat bit for bit.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from skyrl_agent._openmp import release_openmp_workers
from skyrl_agent._prefix import common_prefix
from skyrl_agent.policies._attention import ATTENTION
from skyrl_agent.policies._cascade import SharedPrefix, cascade_step, use_cascade_attention
from skyrl_agent.policies._lean import LeanCopy
from skyrl_agent.policies._llama_step import LlamaDecodeStep
from skyrl_agent.policies._sampling import find_stop, prefill, sample_rows
from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError

__all__ = ["EngineConfig", "EngineStats", "InferenceEngine", "PrefixStore"]

log = logging.getLogger(__name__)

#: One row's KV, per layer ``(keys, values)`` of ``[1, heads, T, dim]``.
_KV = list[tuple[torch.Tensor, torch.Tensor]]
#: A stored past a newcomer continues: ``(tokens, KV)``.
_Past = tuple[int, _KV]


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
    workers_released: int = 0
    """Times the engine's thread, going idle, had the OpenMP runtime release its workers (on
    CPU; counted also when it held none; see :mod:`skyrl_agent._openmp`)."""


# --------------------------------------------------------------------------- the KV buffers
def _slot_layer_class() -> type:
    """The layer class (built on first use: transformers is imported lazily)."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One layer's view of :class:`_Slots`, as transformers' ``Cache`` expects of a layer."""

        is_sliding = False

        def __init__(self, slots: _Slots, index: int) -> None:
            super().__init__()
            self.slots, self.index, self.is_initialized = slots, index, True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            return None

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> Any:
            return self.slots.write(self.index, key_states, value_states)

        def get_seq_length(self) -> int:
            return self.slots.t

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            if self.slots.full_width:
                return self.slots.cap_len, 0
            return self.slots.t + query_length, 0

        def get_max_length(self) -> int:
            return -1

    return SlotLayer


class _Slots:
    """Preallocated KV buffers for the running rows (see the module docstring). ``valid[b, c]``
    says whether row ``b`` attends to column ``c`` (False for padding, and for the gap inside a
    row prefilled with a shared prefix and a shorter suffix than its batch's longest)."""

    def __init__(
        self, layers: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, max_rows: int
    ) -> None:
        self.layers, self.heads, self.head_dim, self.max_rows = layers, heads, head_dim, max_rows
        self.dtype, self.device = dtype, device
        self.K: list[torch.Tensor] = []
        self.V: list[torch.Tensor] = []
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=device)
        self.cap_rows = self.cap_len = 0
        self.rows = 0  # running rows
        self.t = 0  # the next column to write
        self.cache: Any = None  # a transformers Cache whose layers are views of these buffers
        self.full_width = False  # during a decode step: attention reads every column (see write)

    def ensure(self, rows: int, length: int) -> None:
        """Room for ``rows`` rows and ``length`` columns (grown by doubling, contents kept)."""
        if rows <= self.cap_rows and length <= self.cap_len:
            return
        new_rows = max(rows, self.cap_rows, 1)
        if rows > self.cap_rows:  # doubling, up to the most rows that run: every growth copies
            new_rows = max(rows, min(2 * self.cap_rows, self.max_rows))
        new_len = max(self.cap_len, 128)
        while new_len < length:  # doubling, then steps of 256: full-width decode reads it all
            new_len = new_len * 2 if new_len < 512 else new_len + 256
        shape = (new_rows, self.heads, new_len, self.head_dim)
        K = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        V = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        valid = torch.zeros((new_rows, new_len), dtype=torch.bool, device=self.device)
        B, t = self.rows, self.t
        if B and t:
            for i in range(self.layers):
                K[i][:B, :, :t] = self.K[i][:B, :, :t]
                V[i][:B, :, :t] = self.V[i][:B, :, :t]
            valid[:B, :t] = self.valid[:B, :t]
        self.K, self.V, self.valid, self.cap_rows, self.cap_len = K, V, valid, new_rows, new_len
        self.cache = None

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one decode step's keys/values (``[B, heads, 1, dim]``) at column ``t``; return
        the layer's keys and values up to and including it."""
        B, t, q = self.rows, self.t, k.shape[2]
        self.K[layer][:B, :, t : t + q] = k
        self.V[layer][:B, :, t : t + q] = v
        if self.full_width:  # contiguous: a slice of the columns would be copied by bf16 matmuls
            return self.K[layer][:B], self.V[layer][:B]
        return self.K[layer][:B, :, : t + q], self.V[layer][:B, :, : t + q]

    def full_step_mask(self) -> torch.Tensor:
        """Like :meth:`step_mask` (bool), over every column of the buffers (those from ``t + 1``
        on masked), for a decode step with :attr:`full_width` on."""
        self.step_mask(False)
        keep = self.valid[: self.rows, : self.cap_len].clone()
        keep[:, self.t + 1 :] = False
        return keep[:, None, None, :]

    def step_mask(self, additive: bool) -> torch.Tensor:
        """``[B, 1, 1, t + 1]``: the columns each row attends to in the next decode step (its
        valid ones and the new one); marks column ``t`` valid."""
        B, t = self.rows, self.t
        self.valid[:B, t] = True
        keep = self.valid[:B, : t + 1][:, None, None, :]
        if not additive:
            return keep
        return torch.zeros(keep.shape, dtype=self.dtype, device=self.device).masked_fill(
            ~keep, torch.finfo(self.dtype).min
        )

    def _shift(self, by: int) -> None:
        """Move every running row's columns by ``by`` (positive: right, negative: left)."""
        B, t = self.rows, self.t
        if by and B:
            lo = -by if by < 0 else 0
            for buf in (*self.K, *self.V):
                buf[:B, :, lo + by : t + by] = buf[:B, :, lo:t].clone()
            self.valid[:B, lo + by : t + by] = self.valid[:B, lo:t].clone()
            if by > 0:
                self.valid[:B, :by] = False
        self.t += by

    def insert(self, kv: Sequence[tuple[torch.Tensor, torch.Tensor]], valid_GT: torch.Tensor) -> None:
        """Add rows whose KV (per layer ``[G, heads, T_g, dim]``, with ``valid_GT`` saying which
        columns are real) ends at the batch's current column."""
        used = valid_GT.any(0).nonzero()
        lead = int(used[0]) if len(used) else valid_GT.shape[1]
        if lead:  # columns no newcomer attends to (a shared prefix they read from one copy)
            valid_GT = valid_GT[:, lead:]
            kv = [(k[:, :, lead:], v[:, :, lead:]) for k, v in kv]
        G, Tg = valid_GT.shape
        if self.rows == 0:
            self.t = 0
        if Tg > self.t:
            self.ensure(self.rows + G, Tg + 1)
            self._shift(Tg - self.t)
        self.ensure(self.rows + G, self.t + 1)
        B, t = self.rows, self.t
        for i, (k, v) in enumerate(kv):
            self.K[i][B : B + G, :, t - Tg : t] = k
            self.V[i][B : B + G, :, t - Tg : t] = v
        self.valid[B : B + G, : self.cap_len] = False
        self.valid[B : B + G, t - Tg : t] = valid_GT.to(torch.bool)
        self.rows += G

    def remove(self, row: int) -> None:
        """Drop ``row``: the last row moves into its place (callers mirror the move)."""
        last, t = self.rows - 1, self.t
        if row != last:
            for buf in (*self.K, *self.V):
                buf[row, :, :t] = buf[last, :, :t]
            self.valid[row, :t] = self.valid[last, :t]
        self.rows -= 1
        if self.rows == 0:
            self.t = 0

    def extract(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """A copy of ``row``'s KV, per layer ``[1, heads, T_r, dim]`` (its valid columns in
        order; a row prefilled with a shared prefix and a shorter suffix than its batch's longest
        has a gap, which is dropped: positions were given without it), or None for no columns."""
        cols = self.valid[row, : self.t].nonzero().flatten()
        if not len(cols):
            return None
        s = int(cols[0])
        if len(cols) == self.t - s:  # contiguous: one slice
            return [
                (k[row : row + 1, :, s : self.t].clone(), v[row : row + 1, :, s : self.t].clone())
                for k, v in zip(self.K, self.V, strict=True)
            ]
        return [
            (
                k[row : row + 1, :, : self.t].index_select(2, cols),
                v[row : row + 1, :, : self.t].index_select(2, cols),
            )
            for k, v in zip(self.K, self.V, strict=True)
        ]

    def compact(self, threshold: int) -> None:
        """Drop leading columns that no row uses, once there are ``threshold`` of them."""
        if not self.rows or not self.t:
            return
        used = self.valid[: self.rows, : self.t].any(0).nonzero()
        lead = int(used[0]) if len(used) else self.t
        if lead >= threshold:
            self._shift(-lead)

    def as_cache(self) -> Any:
        """A transformers ``Cache`` whose layers write into and read from these buffers."""
        if self.cache is None:
            from transformers.cache_utils import Cache

            layer_cls = _slot_layer_class()
            self.cache = Cache(layers=[layer_cls(self, i) for i in range(self.layers)])
        return self.cache

    def release(self) -> None:
        """Free the buffers (the next admission allocates them again)."""
        self.K, self.V, self.cap_rows, self.cap_len, self.rows, self.t = [], [], 0, 0, 0, 0
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
        self.cache = None


# --------------------------------------------------------------------------- reuse across turns
@dataclass
class _Entry:
    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int
    version: int


class PrefixStore:
    """Finished rows' KV by the token ids it covers, bounded in bytes, least recently used out.

    :meth:`find` picks the entry sharing the longest prefix with a prompt; :meth:`take_found`
    hands its KV out, removing an entry used whole (the next turn extends it) and keeping one
    used in part (a system prompt other prompts share)."""

    def __init__(self, max_bytes: int, min_tokens: int) -> None:
        self.max_bytes, self.min_tokens = max_bytes, min_tokens
        self._entries: collections.OrderedDict[int, _Entry] = collections.OrderedDict()
        self._next = 0
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]], version: int) -> None:
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if nbytes > self.max_bytes or len(ids) < self.min_tokens:
            return
        while self._entries and self.nbytes + nbytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.nbytes
            self.evictions += 1
        self._entries[self._next] = _Entry(ids, kv, nbytes, version)
        self._next += 1
        self.nbytes += nbytes

    def find(self, prompt: Sequence[int], version: int | None) -> tuple[int, int] | None:
        """``(entry key, tokens)`` of the entry sharing the longest prefix with ``prompt`` (at
        most ``len(prompt) - 1`` tokens: the last prompt token must run, for its logits), or
        None. ``version``: only entries made with these weights (None: any)."""
        best_key, best_len = None, 0
        prompt = list(prompt)  # once: slices of a list compare in C
        limit = len(prompt) - 1
        for key, e in self._entries.items():
            if version is not None and e.version != version:
                continue
            n = min(len(e.ids), limit)
            if n <= best_len or e.ids[0] != prompt[0]:
                continue
            if e.ids[:n] != prompt[:n]:
                n = common_prefix(e.ids, prompt, n)
            if n > best_len:
                best_key, best_len = key, n
        if best_key is None or best_len < self.min_tokens:
            return None
        return best_key, best_len

    def take_found(self, key: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The first ``n`` columns of entry ``key`` (from :meth:`find`), or None when that entry
        has been evicted since. An entry used whole is removed (the next turn extends it and
        stores a longer one when it finishes); one used in part (a system prompt shared by other
        prompts) stays, as the most recently used. The columns handed out stay valid after the
        entry is evicted."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if n == len(entry.ids):
            del self._entries[key]
            self.nbytes -= entry.nbytes
            return entry.kv
        self._entries.move_to_end(key)
        return [(k[:, :, :n], v[:, :, :n]) for k, v in entry.kv]

    def take(
        self, prompt: Sequence[int], version: int | None
    ) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]] | None:
        """:meth:`find` then :meth:`take_found`: ``(tokens, KV)`` or None."""
        found = self.find(prompt, version)
        if found is None:
            return None
        key, n = found
        kv = self.take_found(key, n)
        return None if kv is None else (n, kv)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0


# --------------------------------------------------------------------------- rows
@dataclass
class _Row:
    request: GenerateRequest
    future: concurrent.futures.Future
    deadline: float | None
    generator: torch.Generator
    prompt: list[int]
    version: int = 0
    new_ids: list[int] = field(default_factory=list)
    new_lps: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    next_pos: int = 0
    shared_n: int = 0  # leading prompt tokens whose KV the row reads from the engine's SharedPrefix
    finish: FinishReason | None = None
    matched: str | int | None = None

    @property
    def params(self) -> SamplingParams:
        return self.request.sampling

    def budget(self) -> int:
        return len(self.prompt) + self.params.max_tokens


# --------------------------------------------------------------------------- the engine
class InferenceEngine:
    """Continuous batching with KV reuse across turns for one model (see the module docstring).

    Args:
        model: a transformers causal LM in eval mode.
        tokenizer: its tokenizer (decodes outputs, finds stop strings).
        eos_token_ids: tokens that end a generation.
        pad_token_id: filler for left padding inside a prefill.
        cache_kwarg: the name under which ``model.forward`` takes a KV cache
            (``skyrl_agent.models.cache_kwarg``).
        config: the engine's settings.
        seed_source: draws a seed for requests without their own.
        context: a context manager entered around model calls (bf16 autocast).
        kv_dtype: the dtype of the KV cache and of stored prefixes; by default the model's.
            Under bf16 autocast, ``torch.bfloat16``: attention casts keys and values to bf16
            anyway, so storing them in bf16 changes no result and saves casting the whole cache
            at every decode step (and halves its memory).
        lean: a :class:`~skyrl_agent.policies._lean.LeanCopy` of ``model`` that runs the model
            calls instead of it (bf16 linear weights); it is refreshed from ``model`` whenever
            ``model``'s weights change, and gives the same results.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_token_ids: frozenset[int],
        pad_token_id: int,
        cache_kwarg: str,
        config: EngineConfig | None = None,
        seed_source: Callable[[], int],
        context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        kv_dtype: torch.dtype | None = None,
        lean: LeanCopy | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self._lean = lean
        self._run = lean.module if lean is not None else model  # what the steps call
        self._lean_key: int | None = None
        self.config = config or EngineConfig()
        # the engine's own copy runs the cascade attention function (masked prefills read
        # shared key/value heads in place; decode steps read a shared prefix once when
        # cascade_min_tokens is on); the trainer's module keeps SDPA
        switched = lean is not None and use_cascade_attention(lean.module)
        self._cascade_on = bool(switched and self.config.cascade_min_tokens > 0)
        self._shared: SharedPrefix | None = None
        self.eos_token_ids, self.pad_token_id = eos_token_ids, pad_token_id
        self._cache_kwarg = cache_kwarg
        self._seed_source, self._context = seed_source, context
        self.device = next(model.parameters()).device
        cfg = model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = kv_dtype or next(model.parameters()).dtype
        self._slots = _Slots(cfg.num_hidden_layers, heads, head_dim, dtype, self.device, self.config.max_rows)
        self._additive_mask = getattr(cfg, "_attn_implementation", "sdpa") not in (
            "sdpa",
            "flash_attention_2",
            ATTENTION,
            "skyrl_packed",  # the trainer's packed forward (trainers._packed): SDPA for every other call
        )
        # with the opt-in matmul attention on CPU, decode steps attend over whole buffers:
        # contiguous keys and values (a strided slice cost a copy per layer when those matmuls
        # ran in bf16: 39% of a step, measured; the float32 version casts them anyway)
        self._full_width_decode = getattr(cfg, "_attn_implementation", None) == ATTENTION
        self._step = LlamaDecodeStep.build(self._run) if self.config.lean_decode_step else None
        self.store = PrefixStore(self.config.prefix_cache_bytes, self.config.min_reuse_tokens)
        self.weights_version = 0
        self._param_ids = frozenset(id(p) for p in model.parameters())
        self._external_changes = 0  # optimizer steps on our parameters, weights_changed() calls
        self._weights_key = self._current_weights_key()
        self._stats = EngineStats()
        self._cv = threading.Condition()  # guards the queue and the counters
        self._step_lock = threading.Lock()  # held by a scheduler step or a weight update
        self._waiting: collections.deque[_Row] = collections.deque()
        self._rows: list[_Row] = []  # running, in slot order
        self._since_admit = 0
        self._updates_waiting = 0
        self._closed = False
        # the engine's thread computes with as many threads as its creator set (a new thread
        # starts from the runtime's default, not from torch.set_num_threads of another thread)
        self._num_threads = torch.get_num_threads()
        self._release_threads = self.device.type == "cpu"
        self._thread = threading.Thread(target=self._loop, name="skyrl-engine", daemon=True)
        self._optimizer_hook = _watch_optimizer_steps(self)
        self._thread.start()
        _LIVE.add(self)

    # ------------------------------------------------------------------ public
    def submit(self, request: GenerateRequest, deadline_s: float | None = None) -> concurrent.futures.Future:
        """Queue ``request``; the future resolves to its :class:`GenerateOutput` (or raises).
        Cancelling the future drops the request at the next step."""
        return self.submit_many([request], deadline_s)[0]

    def submit_many(
        self, requests: Sequence[GenerateRequest], deadline_s: float | None = None
    ) -> list[concurrent.futures.Future]:
        """Queue ``requests`` together (one step admits them all when there is room, so a batch
        given at once prefills at once however the engine's thread is timed); one future each."""
        rows = []
        for request in requests:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            p = request.sampling
            g = torch.Generator(device=self.device)
            g.manual_seed(p.seed if p.seed is not None else self._seed_source())
            deadline = time.monotonic() + deadline_s if deadline_s is not None else None
            rows.append(_Row(request, fut, deadline, g, [int(x) for x in request.prompt_ids]))
        if self._release_threads:  # this thread's idle OpenMP workers would slow the engine's
            release_openmp_workers()
        with self._cv:
            if self._closed:
                raise RuntimeError("the inference engine is closed")
            self._waiting.extend(rows)
            self._cv.notify_all()
        return [r.future for r in rows]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Submit ``requests`` and wait for all of them (from any thread but the engine's)."""
        return [f.result() for f in self.submit_many(requests)]

    def update_weights(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (which changes the model's weights) between steps, once the running rows
        have finished; no row starts meanwhile. The prefix store is emptied unless
        ``allow_stale_prefix``."""
        with self._cv:
            self._updates_waiting += 1
        try:
            while True:
                with self._step_lock:
                    if not self._rows:
                        apply()
                        self.weights_version += 1
                        self._weights_key = self._current_weights_key()
                        if not self.config.allow_stale_prefix:
                            self.store.clear()
                        self._shared = None
                        return
                with self._cv:
                    self._cv.wait(timeout=0.05)
        finally:
            with self._cv:
                self._updates_waiting -= 1
                self._cv.notify_all()

    def weights_changed(self) -> None:
        """Say that the model's weights were changed in place outside :meth:`update_weights` (by a
        kernel that bypasses version counters); stored KV from before is not reused after it.
        ``torch.optim`` steps on the engine's parameters are seen without this call."""
        self._external_changes += 1

    def stats(self) -> EngineStats:
        """A copy of the counters."""
        with self._cv:
            s = dataclasses.replace(self._stats)
            s.store_evictions = self.store.evictions
            s.prefix_store_bytes = self.store.nbytes
            return s

    def clear_prefix_store(self) -> None:
        """Forget every stored prefix."""
        with self._cv:
            self.store.clear()

    def close(self) -> None:
        """Stop the worker; waiting and running requests fail. Idempotent."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._optimizer_hook.remove()
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the loop
    def _has_work(self) -> bool:
        return bool(self._closed or self._rows or (self._waiting and not self._updates_waiting))

    def _loop(self) -> None:
        if torch.get_num_threads() != self._num_threads:
            # only when it differs: the call also sets process-wide state (MKL's thread count
            # and its dynamic adjustment), which made two engines' results differ run to run
            torch.set_num_threads(self._num_threads)
        while True:
            with self._cv:
                idle = not self._has_work()
            if idle and self._release_threads and release_openmp_workers():
                with self._cv:  # the trainer may compute meanwhile (skyrl_agent._openmp)
                    self._stats.workers_released += 1
            with self._cv:
                self._cv.wait_for(self._has_work)
                if self._closed:
                    break
            admitted: list[_Row] = []
            with self._step_lock:
                try:
                    with self._cv:
                        admitted = self._admit_locked()
                    self._refresh_lean()
                    with torch.inference_mode(), self._context():
                        if admitted:
                            self._prefill(admitted)
                        if self._rows:
                            self._decode_step()
                except Exception as exc:  # noqa: BLE001 - a failed step fails its rows, not the engine
                    log.exception("inference engine step failed")
                    self._fail_all([*admitted, *self._rows], exc)
                if not self._rows and self._slots.cap_len > 4096:
                    self._slots.release()  # a long context's buffers go back once it is done
            with self._cv:
                self._cv.notify_all()  # a weight update may wait for the rows to drain
        err = RuntimeError("the inference engine was closed")
        with self._step_lock:
            self._fail_all([*self._rows, *self._waiting], err)
            self._waiting.clear()

    def _refresh_lean(self) -> None:
        """Bring the lean copy up to the model's weights when they changed (rows in flight
        then go on with the new weights, as they would sampling the model itself)."""
        if self._lean is None:
            return
        key = self._current_weights_key()
        if key != self._lean_key:
            self._lean.refresh()
            self._lean_key = key
            self._stats.lean_refreshes += 1

    def _current_weights_key(self) -> int:
        """Changes whenever a parameter is replaced, modified in place (its version counter) or
        stepped by an optimizer, and on :meth:`weights_changed`."""
        return hash((self._external_changes, tuple((id(p), p._version) for p in self.model.parameters())))

    def _admit_locked(self) -> list[_Row]:
        """Waiting rows that fit, in arrival order (a row that does not fit waits for room)."""
        if self._updates_waiting or not self._waiting:
            return []
        # a busy batch takes newcomers every admit_every steps, so their prefills run together
        if len(self._rows) * 2 > self.config.max_rows and self._since_admit < self.config.admit_every:
            return []
        self._since_admit = 0
        if not self._rows:  # in flight, rows keep the weights they started with
            key = self._current_weights_key()
            if key != self._weights_key:
                self._weights_key = key
                self._shared = None
                if not self.config.allow_stale_prefix:
                    self.store.clear()
        used = sum(r.budget() for r in self._rows)
        out: list[_Row] = []
        while self._waiting and len(self._rows) + len(out) < self.config.max_rows:
            row = self._waiting[0]
            if row.future.cancelled():
                self._waiting.popleft()
                continue
            if (self._rows or out) and used + row.budget() > self.config.max_tokens_in_flight:
                break
            self._waiting.popleft()  # the future stays cancellable: a cancelled row leaves at its next step
            row.version = self._weights_key
            used += row.budget()
            out.append(row)
        self._stats.peak_rows = max(self._stats.peak_rows, len(self._rows) + len(out))
        self._stats.peak_tokens_in_flight = max(self._stats.peak_tokens_in_flight, used)
        return out

    # ------------------------------------------------------------------ prefill
    def _prefill(self, rows: list[_Row]) -> None:
        """Prefill newcomers, sample their first tokens and move the ones that go on into the batch.

        Newcomers whose prompts start with the same stored prefix (the samples of a group; prompts
        under one system prompt) run as one batch on top of it; the others as one fresh batch."""
        version = None if self.config.allow_stale_prefix else self._weights_key
        groups: dict[tuple[int, int] | None, list[_Row]] = {}
        for row in rows:
            hit = self.store.find(row.prompt, version) if self.config.prefix_cache_bytes else None
            groups.setdefault(hit, []).append(row)
        fresh = groups.pop(None, [])
        # Every hit's KV is taken before any prefill runs: a prefill stores prefixes (put), which
        # may evict an entry found above. Ascending length: an entry used in part by one group and
        # whole by another (which removes it) hands out its part first.
        hits: list[tuple[list[_Row], int, _KV]] = []
        for (key, n), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
            kv = self.store.take_found(key, n)
            if kv is None:  # gone since find (cannot happen while takes precede prefills)
                fresh += members
                continue
            self._stats.reused_tokens += n * len(members)
            hits.append((members, n, kv))
            self._offer_shared(members[0].prompt[:n], kv, version)
        if fresh:
            self._prefill_isolated(fresh, [r.prompt for r in fresh], [])
        # Next turns of episodes under the shared prefix run over their pasts without it, which
        # the attention reads once for all of them (_cascade._prefill_over_prefix); the others
        # over their whole pasts. The cascaded ones run first: a plain prefill may offer a new
        # shared prefix (_offer_shared), which it may take only while no running row reads the
        # current one. Entries: (row, tokens of its prompt the past covers, past).
        N = len(self._shared.ids) if self._shared is not None else 0
        batches: dict[bool, list[tuple[_Row, int, _Past]]] = {True: [], False: []}
        groups: dict[bool, list[tuple[list[_Row], int, _Past]]] = {True: [], False: []}
        for members, n, kv in hits:
            own = self._after_shared(members[0], n, kv)
            past = (n, kv) if own is None else own
            if len(members) > 1:  # one past for all: it runs once, repeated
                groups[own is not None].append((members, n, past))
            else:
                batches[own is not None].append((members[0], n, past))
        for over in (True, False):
            if over:
                self._stats.cascade_prefill_rows += len(batches[True]) + sum(
                    len(m) for m, _, _ in groups[True]
                )
            for members, n, past in groups[over]:
                self._prefill_isolated(
                    members, [r.prompt[n:] for r in members], [past] * len(members), N * over
                )
            # next turns of different episodes: batches over their padded pasts, split where the
            # padding of short tails to the longest would cost more than another pass
            batch = batches[over]
            for part in _split_by_length(batch, [len(r.prompt) - n for r, n, _ in batch]):
                self._prefill_isolated(
                    [r for r, _, _ in part],
                    [r.prompt[n:] for r, n, _ in part],
                    [p for _, _, p in part],
                    N * over,
                )

    def _after_shared(self, row: _Row, n: int, kv: _KV) -> _Past | None:
        """``(n - N, the columns after the shared prefix)`` when ``row``'s past of ``n`` stored
        columns starts with the whole shared prefix (``N`` tokens, the same weights), else None."""
        shared = self._shared
        if shared is None or not self._cascade_on or self.device.type != "cpu":
            return None
        N = len(shared.ids)
        if n <= N or row.version != shared.version or shared.shared_with(row.prompt) != N:
            return None
        return n - N, [(k[:, :, N:n], v[:, :, N:n]) for k, v in kv]

    def _offer_shared(self, ids: list[int], kv: _KV, version: int | None) -> None:
        """Make ``ids`` (with its KV, computed with weights ``version``) the prefix rows read from
        one copy, unless a running row still reads the current one or it is too short. Offers
        that start like the current prefix narrow it to what both share (the system prompt
        of prompts that go on with different questions)."""
        if not self._cascade_on or version is None or len(ids) < self.config.cascade_min_tokens:
            return
        if self._shared is not None and any(r.shared_n for r in self._rows):
            return
        current = self._shared
        if current is not None and current.version == version:
            n = current.shared_with(ids)
            if n == len(current.ids):
                return
            if n >= self.config.cascade_min_tokens:  # e.g. two questions: keep what they share
                self._shared = SharedPrefix.from_kv(ids[:n], current.stored, version)
                return
        self._shared = SharedPrefix.from_kv(ids, kv, version)
        self._adopt_shared()

    def _adopt_shared(self) -> None:
        """Running rows that start with the new shared prefix (a request that arrived alone just
        before the rest of its batch) drop their copy of its columns and read the shared one:
        otherwise their long rows would keep every row's buffers as wide as before."""
        shared, slots = self._shared, self._slots
        if shared is None or not self._rows:
            return
        adopted = False
        for b, row in enumerate(self._rows):
            if row.shared_n or row.version != shared.version:
                continue
            n = shared.shared_with(row.prompt)
            if n < self.config.cascade_min_tokens:
                continue
            cols = slots.valid[b, : slots.t].nonzero().flatten()[:n]
            slots.valid[b, cols] = False
            row.shared_n, adopted = n, True
        if adopted:
            slots.compact(1)

    def _prefill_isolated(
        self,
        rows: list[_Row],
        tails: list[list[int]],
        pasts: list[_Past],
        over_shared: int = 0,
    ) -> None:
        """:meth:`_run_prefill`; when a group fails, each row runs alone on its whole prompt, so
        only the row at fault gets the error (the running rows are not touched by a prefill)."""
        try:
            self._run_prefill(rows, tails, pasts, over_shared)
        except Exception as exc:  # noqa: BLE001 - handed to the row(s) at fault
            if len(rows) == 1 and not pasts:
                _resolve(rows[0].future, exc=exc)
                return
            log.warning("a prefill of %d rows failed (%s); running them one by one", len(rows), exc)
            for row in rows:
                if row.future.done():
                    continue
                row.new_ids.clear()
                row.new_lps.clear()
                row.tops.clear()
                row.finish = row.matched = None
                self._prefill_isolated([row], [row.prompt], [])

    def _past_cache(self, pasts: list[_Past]) -> tuple[Any, int, torch.Tensor | None]:
        """``(cache, columns, valid_BP)`` for rows continuing stored KV. One past shared by every
        row (``pasts`` all the same object): a one-row cache, valid_BP None. Different pasts:
        each row's KV right-aligned in a ``[B, heads, P, dim]`` buffer (P the longest),
        ``valid_BP`` marking the real columns."""
        from transformers import DynamicCache

        cache = DynamicCache()
        if all(p is pasts[0] for p in pasts):
            n, kv = pasts[0]
            for i, (k, v) in enumerate(kv):
                cache.update(k, v, i)
            return cache, n, None
        B, P = len(pasts), max(n for n, _ in pasts)
        valid_BP = torch.zeros((B, P), dtype=torch.long, device=self.device)
        for b, (n, _) in enumerate(pasts):
            valid_BP[b, P - n :] = 1
        for i in range(self._slots.layers):
            k0 = pasts[0][1][i][0]
            K = k0.new_zeros((B, k0.shape[1], P, k0.shape[3]))
            V = torch.zeros_like(K)
            for b, (n, kv) in enumerate(pasts):
                K[b, :, P - n :] = kv[i][0][0]
                V[b, :, P - n :] = kv[i][1][0]
            cache.update(K, V, i)
        return cache, P, valid_BP

    def _run_prefill(
        self,
        rows: list[_Row],
        tails: list[list[int]],
        pasts: list[_Past],
        over_shared: int = 0,
    ) -> None:
        """Run ``tails`` (each row's prompt after the tokens whose KV its entry of ``pasts``
        holds; ``pasts`` empty for fresh rows) as one left-padded batch. Rows that continue one
        past: the longest prefix their tails share is run once and its KV repeated (a GRPO
        group's samples share their whole prompt) and stored, so later prompts that start the
        same way (other questions under the same system prompt) reuse it. ``over_shared`` (N > 0):
        the pasts are the columns after the shared prefix of N tokens (every row's prompt starts
        with all of it), which the attention reads from its single copy."""
        B, dev = len(rows), self.device
        cache, past_len, past_valid = self._past_cache(pasts) if pasts else (None, 0, None)
        # identical tails on one past (the samples of a group) run once; their rows share the KV
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(t), len(unique)) for t in tails]
        dedupe = past_valid is None and len(unique) < B
        run = [list(t) for t in unique] if dedupe else tails
        offset, over = 0, contextlib.nullcontext()
        if over_shared:
            if self._shared is None or len(self._shared.ids) != over_shared:  # the rows retry alone
                raise RuntimeError("the shared prefix changed before a prefill over it")
            offset, over = over_shared, cascade_step(self._shared, None)
        with over:
            cache, logits_BV, attn_BT, _, shared = prefill(
                self._run,
                self._cache_kwarg,
                self.pad_token_id,
                run,
                min_shared_prefix=self.config.min_shared_prefix,
                past=cache,
                past_len=past_len,
                past_valid_BP=past_valid,
                position_offset=offset,
            )
        if dedupe:
            index_B = torch.as_tensor(row_of, device=dev)
            logits_BV, attn_BT = logits_BV.index_select(0, index_B), attn_BT.index_select(0, index_B)
        else:
            row_of = list(range(B))
        self._stats.prefill_tokens += shared + sum(len(x) - shared for x in run)
        self._stats.prefills += 1
        # the columns every row has in common, stored for prompts that start the same way
        common = past_len + (shared or (len(run[0]) if B > 1 and len(run) == 1 else 0))
        # (not over the shared prefix: that KV lacks the prefix's columns)
        if common > past_len and not over_shared and (self.config.prefix_cache_bytes or self._cascade_on):
            common_kv = [
                (lay.keys[:1, :, :common].clone(), lay.values[:1, :, :common].clone()) for lay in cache.layers
            ]
            if self.config.prefix_cache_bytes:
                self.store.put(rows[0].prompt[:common], common_kv, rows[0].version)
            self._offer_shared(rows[0].prompt[:common], common_kv, rows[0].version)
        for r in rows:
            r.next_pos = len(r.prompt)
        keep = self._sample(rows, logits_BV)
        for row in rows:
            if row.finish is not None:
                self._finish(row)
        if not keep:
            return
        sel = [row_of[j] for j in keep]
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        valid = attn_BT
        if sel != list(range(len(run))):
            idx = torch.as_tensor(sel, device=dev)
            layers = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in layers]
        if len(keep) < B:
            valid = valid.index_select(0, torch.as_tensor(keep, device=dev))
        shared = self._shared
        if over_shared:  # their columns are already the ones after the prefix
            for j in keep:
                rows[j].shared_n = over_shared
        elif shared is not None:
            for j in keep:
                r = rows[j]
                n = shared.shared_with(r.prompt) if r.version == shared.version else 0
                r.shared_n = n if n >= self.config.cascade_min_tokens else 0
            n_G = torch.as_tensor([rows[j].shared_n for j in keep], device=dev)
            if bool(n_G.any()):  # those rows hold only the columns after the shared prefix
                valid = valid * (valid.cumsum(1) > n_G[:, None])
        self._slots.insert(layers, valid)
        self._rows += [rows[j] for j in keep]

    # ------------------------------------------------------------------ decode
    def _decode_step(self) -> None:
        slots, rows = self._slots, self._rows
        if slots.t + 1 > slots.cap_len:
            slots.compact(1)
        slots.ensure(slots.rows, slots.t + 1)
        dev = self.device
        tokens = torch.as_tensor([r.new_ids[-1] for r in rows], dtype=torch.long, device=dev)[:, None]
        pos = torch.as_tensor([r.next_pos for r in rows], dtype=torch.long, device=dev)[:, None]
        slots.full_width = self._full_width_decode
        shared_n = [r.shared_n for r in rows]
        cascade: contextlib.AbstractContextManager = contextlib.nullcontext()
        if self._shared is not None and any(shared_n):
            N = len(self._shared.ids)
            reads_BN = None  # every row reads the whole prefix: nothing to mask
            if any(n != N for n in shared_n):
                reads_BN = (
                    torch.arange(N, device=dev)[None, :] < torch.as_tensor(shared_n, device=dev)[:, None]
                )
            cascade = cascade_step(self._shared, reads_BN)
            self._stats.cascade_rows_decoded += sum(1 for n in shared_n if n)
            self._stats.cascade_columns_saved += sum(shared_n)
        try:
            mask = slots.full_step_mask() if slots.full_width else slots.step_mask(self._additive_mask)
            with cascade:
                if self._step is not None:
                    logits_BV = self._step(tokens, pos, slots.write, mask)
                else:
                    out = self._run(
                        input_ids=tokens,
                        position_ids=pos,
                        attention_mask=mask,
                        use_cache=True,
                        **{self._cache_kwarg: slots.as_cache()},
                    )
                    logits_BV = out.logits[:, -1, :]
        finally:
            slots.full_width = False
        slots.t += 1
        for r in rows:
            r.next_pos += 1
        self._stats.decode_steps += 1
        self._since_admit += 1
        self._stats.rows_decoded += len(rows)
        keep = set(self._sample(rows, logits_BV.float()))
        for j in range(len(rows) - 1, -1, -1):  # from the end: a removal moves the last row
            if j not in keep:
                self._leave(j)
        slots.compact(self.config.compact_every)

    def _leave(self, j: int) -> None:
        """Row ``j`` of the batch is done: store its KV (before its caller hears of it, so the
        next turn finds it), resolve it, drop it (the last row takes its place)."""
        row = self._rows[j]
        if self.config.prefix_cache_bytes and (
            row.version == self._weights_key or self.config.allow_stale_prefix
        ):
            kv = self._slots.extract(j)
            if row.shared_n and self._shared is not None:  # the shared prefix's columns go first
                n, pre = row.shared_n, self._shared.stored
                kv = [
                    (torch.cat([pk[:, :, :n], k], 2), torch.cat([pv[:, :, :n], v], 2))
                    for (pk, pv), (k, v) in zip(
                        pre, kv or [(pk[:, :, :0], pv[:, :, :0]) for pk, pv in pre], strict=True
                    )
                ]
            if kv is not None:  # the last token was sampled, never run
                self.store.put(row.prompt + row.new_ids[:-1], kv, row.version)
        self._finish(row)
        self._slots.remove(j)
        last = self._rows.pop()
        if j < len(self._rows):
            self._rows[j] = last

    # ------------------------------------------------------------------ sampling
    def _sample(self, rows: list[_Row], logits_BV: torch.Tensor) -> list[int]:
        """Sample one token for each of ``rows`` and set ``finish`` on the rows that are done.
        Returns the indices of the rows that go on."""
        params = [r.params for r in rows]
        tokens_B, lps_B = sample_rows(logits_BV, params, [r.generator for r in rows])
        tokens, lps = tokens_B.tolist(), lps_B.tolist()
        want_top = min(max(p.top_logprobs for p in params), logits_BV.shape[-1])
        if want_top:  # the most likely tokens under the raw distribution (as the logprobs)
            top_vals, top_ids = torch.topk(torch.log_softmax(logits_BV, dim=-1), want_top, dim=-1)
            top_vals_l, top_ids_l = top_vals.tolist(), top_ids.tolist()
        keep = []
        now = time.monotonic()
        for j, row in enumerate(rows):
            tok, p = tokens[j], params[j]
            row.new_ids.append(tok)
            row.new_lps.append(lps[j])
            self._stats.generated_tokens += 1
            if want_top and p.top_logprobs:
                k = p.top_logprobs
                row.tops.append(list(zip(top_ids_l[j][:k], top_vals_l[j][:k], strict=True)))
            if row.future.cancelled():
                row.finish = FinishReason.ABORT
            elif row.deadline is not None and now > row.deadline:
                row.finish = FinishReason.ABORT
            elif (tok in self.eos_token_ids and not p.ignore_eos) or tok in p.stop_token_ids:
                row.finish, row.matched = FinishReason.STOP, tok
            elif p.stop and (hit := find_stop(self.tokenizer, row.new_ids, p.stop)) is not None:
                row.finish, row.matched = FinishReason.STOP, hit
            elif len(row.new_ids) >= p.max_tokens:
                row.finish = FinishReason.LENGTH
            if row.finish is None:
                keep.append(j)
        return keep

    def _finish(self, row: _Row) -> None:
        with self._cv:
            self._stats.requests += 1
            self._stats.prompt_tokens += len(row.prompt)
        if row.finish == FinishReason.ABORT and row.deadline is not None and time.monotonic() > row.deadline:
            _resolve(row.future, exc=TimeoutError("the generation ran past its deadline"))
            return
        ids, p = row.new_ids, row.params
        text_ids = ids[:-1] if ids and ids[-1] in self.eos_token_ids and not p.ignore_eos else ids
        _resolve(
            row.future,
            GenerateOutput(
                token_ids=list(ids),
                logprobs=list(row.new_lps) if p.logprobs else None,
                finish_reason=row.finish or FinishReason.LENGTH,
                text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                matched_stop=row.matched,
                top_logprobs=row.tops if p.top_logprobs else None,
            ),
        )

    def _fail_all(self, rows: Sequence[_Row], exc: BaseException) -> None:
        """``rows`` get ``exc``; the batch starts over empty."""
        for row in rows:
            _resolve(row.future, exc=exc)
        self._rows.clear()
        self._slots.release()


#: What one more prefill pass costs, in padded token positions: on the project's 2-core machine
#: (bf16, the bundled model, 2026-12-05) a next-turn prefill took about 60 ms plus 1.3 ms per
#: position of its rows x its longest tail (one row of 17 tokens: 75 ms; 5 rows padded to 76:
#: 560 ms; 8 rows of 17-110 tokens padded to 110: 1.3 s).
_PASS_COST_POSITIONS = 48


def _split_by_length(items: list[Any], lengths: list[int]) -> list[list[Any]]:
    """``items`` in batches of similar ``lengths`` (each padded to its longest) that minimise
    padded positions plus :data:`_PASS_COST_POSITIONS` per batch; shortest first. An exact
    partition of the sorted lengths into runs, by dynamic programming (a few dozen rows)."""
    if len(items) <= 1:
        return [items] if items else []
    order = sorted(range(len(items)), key=lambda i: lengths[i])
    L = [lengths[i] for i in order]
    best = [0.0] + [float("inf")] * len(L)  # best[j]: cost of the first j sorted items
    cut = [0] * (len(L) + 1)
    for j in range(1, len(L) + 1):
        for i in range(j):  # the last batch holds sorted items i .. j - 1, padded to L[j - 1]
            c = best[i] + _PASS_COST_POSITIONS + (j - i) * L[j - 1]
            if c < best[j]:
                best[j], cut[j] = c, i
    parts, j = [], len(L)
    while j:
        parts.append([items[order[k]] for k in range(cut[j], j)])
        j = cut[j]
    return parts[::-1]


def _resolve(fut: concurrent.futures.Future, result: Any = None, exc: BaseException | None = None) -> None:
    """Set ``fut``'s outcome unless its caller cancelled it meanwhile."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def _watch_optimizer_steps(engine: InferenceEngine) -> Any:
    """Register a global ``torch.optim`` post-step hook that counts, on ``engine`` (held weakly),
    every optimizer step that updates one of its parameters. Returns the hook's handle."""
    ref = weakref.ref(engine)

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        eng = ref()
        if eng is None:
            return
        ids = eng._param_ids
        if any(id(p) in ids for group in optimizer.param_groups for p in group["params"]):
            eng._external_changes += 1

    return register_optimizer_step_post_hook(hook)


#: Engines not yet closed. At interpreter exit each is closed (its thread joined after its step)
#: before daemon threads are frozen: a thread stopped inside a torch call aborts the process.
_LIVE: weakref.WeakSet[InferenceEngine] = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()
