"""The engine's KV memory: the running rows' buffers (:class:`Slots`) and finished rows' KV kept
for the next turn (:class:`PrefixStore`).

:class:`Slots` holds per layer one key and one value buffer ``[rows, kv_heads, length,
head_dim]``. The running rows are rows ``0..B-1``, and every row's newest token sits in the same
column ``t - 1`` (rows are left-padded), so a decode step writes column ``t`` of all rows at once
and attends to columns ``[0, t]`` through a mask that hides each row's padding. Nothing is
concatenated per step (a growing ``DynamicCache`` copies the whole cache every token); rows
leave by moving the last row into the freed one, and leading columns that no row uses are
dropped when they add up. The buffers' size is rows x the longest row: :meth:`Slots.planned_bytes`
is what the scheduler budgets with.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_agent._prefix import common_prefix

__all__ = ["KV", "Past", "PrefixStore", "Slots", "StoredKV"]

#: One row's KV, per layer ``(keys, values)`` of ``[1, heads, T, dim]``.
KV = list[tuple[torch.Tensor, torch.Tensor]]
#: A stored past a newcomer continues: ``(tokens, KV)``.
Past = tuple[int, KV]


def _slot_layer_class() -> type:
    """The layer class (built on first use: transformers is imported lazily)."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One layer's view of :class:`Slots`, as transformers' ``Cache`` expects of a layer."""

        is_sliding = False

        def __init__(self, slots: Slots, index: int) -> None:
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


class Slots:
    """Preallocated KV buffers for the running rows (see the module docstring). ``valid[b, c]``
    says whether row ``b`` attends to column ``c`` (False for padding, and for the gap inside a
    row prefilled with a shared prefix and a shorter suffix than its batch's longest)."""

    def __init__(
        self, layers: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, max_rows: int
    ) -> None:
        self.layers, self.heads, self.head_dim, self.max_rows = layers, heads, head_dim, max_rows
        self.dtype, self.device = dtype, device
        #: Bytes of keys and values one token takes over every layer.
        self.bytes_per_token = layers * 2 * heads * head_dim * torch.empty((), dtype=dtype).element_size()
        self.K: list[torch.Tensor] = []
        self.V: list[torch.Tensor] = []
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=device)
        self.cap_rows = self.cap_len = 0
        self.rows = 0  # running rows
        self.t = 0  # the next column to write
        self.cache: Any = None  # a transformers Cache whose layers are views of these buffers
        self.full_width = False  # during a decode step: attention reads every column (see write)

    def plan(self, rows: int, length: int, fresh: bool = False) -> tuple[int, int]:
        """The rows and columns :meth:`ensure` would allocate for ``rows`` rows and ``length``
        columns (``fresh``: starting from empty buffers): rows doubling up to ``max_rows``
        (every growth copies), columns to 128, doubling to 512, then in steps of 256 (full-width
        decode reads them all)."""
        cap_rows, cap_len = (0, 0) if fresh else (self.cap_rows, self.cap_len)
        if rows <= cap_rows and length <= cap_len:
            return cap_rows, cap_len
        new_rows = max(rows, cap_rows, 1)
        if rows > cap_rows:
            new_rows = max(rows, min(2 * cap_rows, self.max_rows))
        new_len = max(cap_len, 128)
        while new_len < length:
            new_len = new_len * 2 if new_len < 512 else new_len + 256
        return new_rows, new_len

    def planned_bytes(self, rows: int, length: int, fresh: bool = False) -> int:
        """Bytes of the buffers once they hold ``rows`` rows of ``length`` columns (``fresh``:
        if they were allocated for them from empty)."""
        cap_rows, cap_len = self.plan(rows, length, fresh)
        return cap_rows * cap_len * self.bytes_per_token

    def ensure(self, rows: int, length: int) -> None:
        """Room for ``rows`` rows and ``length`` columns (grown by doubling, contents kept)."""
        if rows <= self.cap_rows and length <= self.cap_len:
            return
        new_rows, new_len = self.plan(rows, length)
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

    def nbytes(self) -> int:
        """Bytes the key and value buffers hold (allocated, not only used)."""
        return self.cap_rows * self.cap_len * self.bytes_per_token

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


def _kv_bytes(kv: KV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


@dataclass
class StoredKV:
    """What :meth:`PrefixStore.take_found` hands out: the KV of a prompt's first tokens, either
    whole (``head`` None) or as a head held by reference (a shared prefix's stored columns, its
    first ``head_n`` used) and the columns after it (``kv``)."""

    kv: KV
    head: KV | None = None
    head_n: int = 0

    def full(self) -> KV:
        """Every column, the head's copied in front of the rest when there is one."""
        if self.head is None:
            return self.kv
        n = self.head_n
        return [
            (torch.cat([hk[:, :, :n], k], 2), torch.cat([hv[:, :, :n], v], 2))
            for (hk, hv), (k, v) in zip(self.head, self.kv, strict=True)
        ]


@dataclass
class _Entry:
    ids: list[int]
    kv: KV
    """The columns from ``head_n`` on (all of them without a head)."""
    nbytes: int
    """Bytes of ``kv`` (a head counts once in the store, however many entries hold it)."""
    version: int
    head: KV | None = None
    head_n: int = 0


class PrefixStore:
    """Finished rows' KV by the token ids it covers, bounded in bytes, least recently used out.

    :meth:`find` picks the entry sharing the longest prefix with a prompt; :meth:`take_found`
    hands its KV out, removing an entry used whole (the next turn extends it) and keeping one
    used in part (a system prompt other prompts share).

    A row under the engine's shared prefix is stored as that prefix's columns by reference (its
    ``head``) and its own columns after them: every sample of every group under one system prompt
    holds one copy of that prompt's KV, not one each (the main job's rollouts: the prompt is about
    600 of a finished row's 700 columns; with full copies the store sat at its 2 GB bound).
    A head's bytes count once while any entry holds it."""

    def __init__(self, max_bytes: int, min_tokens: int) -> None:
        self.max_bytes, self.min_tokens = max_bytes, min_tokens
        self._entries: collections.OrderedDict[int, _Entry] = collections.OrderedDict()
        self._heads: dict[int, list[int]] = {}  # id of a head -> [entries holding it, its bytes]
        self._next = 0
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _head_bytes_added(self, head: KV | None) -> int:
        """Bytes a new entry holding ``head`` adds for it: all of it if no entry holds it yet."""
        return 0 if head is None or id(head) in self._heads else _kv_bytes(head)

    def _add(self, entry: _Entry) -> None:
        self._entries[self._next] = entry
        self._next += 1
        self.nbytes += entry.nbytes
        if entry.head is not None:
            ref = self._heads.setdefault(id(entry.head), [0, _kv_bytes(entry.head)])
            if ref[0] == 0:
                self.nbytes += ref[1]
            ref[0] += 1

    def _remove(self, key: int) -> _Entry:
        entry = self._entries.pop(key)
        self.nbytes -= entry.nbytes
        if entry.head is not None:
            ref = self._heads[id(entry.head)]
            ref[0] -= 1
            if ref[0] == 0:
                self.nbytes -= ref[1]
                del self._heads[id(entry.head)]
        return entry

    def _evict_oldest(self) -> int:
        before = self.nbytes
        self._remove(next(iter(self._entries)))
        self.evictions += 1
        return before - self.nbytes

    def put(
        self,
        ids: list[int],
        kv: KV,
        version: int,
        room: int | None = None,
        head: KV | None = None,
        head_n: int = 0,
    ) -> None:
        """Keep ``kv`` (the KV of ``ids``, computed with weights ``version``), evicting the least
        recently used entries to stay within ``max_bytes`` and ``room`` (what a byte budget
        leaves the store now; None: no other bound). With ``head`` (a shared prefix's stored
        columns, held by reference, its first ``head_n`` covering ``ids[:head_n]``) ``kv`` holds
        the columns after them."""
        nbytes = _kv_bytes(kv)
        bound = self.max_bytes if room is None else min(self.max_bytes, room)
        if nbytes + self._head_bytes_added(head) > bound or len(ids) < self.min_tokens:
            return
        while self._entries and self.nbytes + nbytes + self._head_bytes_added(head) > bound:
            self._evict_oldest()
        self._add(_Entry(ids, kv, nbytes, version, head, head_n if head is not None else 0))

    def shrink_to(self, nbytes: int) -> int:
        """Evict least recently used entries until the store holds at most ``nbytes``; returns
        the bytes freed (the engine's byte budget makes room for running rows this way)."""
        freed = 0
        while self._entries and self.nbytes > max(nbytes, 0):
            freed += self._evict_oldest()
        return freed

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

    def take_found(self, key: int, n: int) -> StoredKV | None:
        """The first ``n`` columns of entry ``key`` (from :meth:`find`), or None when that entry
        has been evicted since. An entry used whole is removed (the next turn extends it and
        stores a longer one when it finishes); one used in part (a system prompt shared by other
        prompts) stays, as the most recently used. The columns handed out stay valid after the
        entry is evicted."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if n == len(entry.ids):
            self._remove(key)
            return StoredKV(entry.kv, entry.head, entry.head_n)
        self._entries.move_to_end(key)
        if entry.head is not None and n <= entry.head_n:
            return StoredKV([(k[:, :, :n], v[:, :, :n]) for k, v in entry.head])
        m = n - entry.head_n
        return StoredKV([(k[:, :, :m], v[:, :, :m]) for k, v in entry.kv], entry.head, entry.head_n)

    def take(self, prompt: Sequence[int], version: int | None) -> tuple[int, KV] | None:
        """:meth:`find` then :meth:`take_found`: ``(tokens, KV)`` (every column) or None."""
        found = self.find(prompt, version)
        if found is None:
            return None
        key, n = found
        got = self.take_found(key, n)
        return None if got is None else (n, got.full())

    def clear(self) -> None:
        self._entries.clear()
        self._heads.clear()
        self.nbytes = 0
