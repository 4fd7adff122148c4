"""The engine's scheduler: which waiting requests join the running batch, and when.

Plain Python over :class:`Row` records (no model, no tensors): the engine's loop asks
:meth:`Scheduler.admit` for newcomers before each step, and the scheduler answers from three
bounds, all in :class:`~skyrl_agent.policies._engine_config.EngineConfig`:

- ``max_rows`` rows and ``max_tokens_in_flight`` tokens (each row counts its prompt plus its
  ``max_tokens``);
- ``memory_bytes``, one byte budget for the sampler's KV when set: the running rows' buffers
  (rows x the longest row, as :class:`~skyrl_agent.policies._kv.Slots` lays them out; the engine
  gives the scheduler a function that says what the buffers would take), the newcomers' KV while
  their prefill moves it into the buffers, and the prefix store, which gets what is left
  (:attr:`Admission.store_room`: the engine evicts down to it before the prefill). A request
  that cannot fit alone fails with an error that names the budget;
- ``admit_every``: while more than half of ``max_rows`` rows run, newcomers join at most every
  this many decode steps, so their prefills run as one batch.

It also plans a prefill's batches (:func:`split_by_length`). Rows run to the end once admitted:
the budget is checked before a row joins, for every token it may still generate, so nothing is
preempted.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_agent.policies._engine_config import EngineConfig
from skyrl_agent.types import FinishReason, GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError

__all__ = ["Admission", "Row", "Scheduler", "resolve", "split_by_length"]


@dataclass
class Row:
    """One request's sequence: what it asked for, what it has sampled, where it stands."""

    request: GenerateRequest
    future: concurrent.futures.Future
    deadline: float | None
    generator: Any  # its own torch.Generator (the runner draws from it)
    prompt: list[int]
    version: int = 0  # the weights key it was admitted under
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
        """Tokens the row may hold: its prompt plus every token it may generate."""
        return len(self.prompt) + self.params.max_tokens


@dataclass
class Admission:
    """What :meth:`Scheduler.admit` decided for one step."""

    rows: list[Row]
    """Newcomers to prefill now, in arrival order."""
    store_room: int | None = None
    """Bytes the prefix store may keep through this step under the byte budget (None: no budget)."""
    reserved: int = 0
    """Bytes of KV the running rows and these newcomers may take (the buffers and the prefill's
    copy; 0 without a budget)."""
    refused: list[tuple[Row, Exception]] = field(default_factory=list)
    """Requests that can never fit, with the error each gets."""


class Scheduler:
    """Admission over the waiting queue and the running rows (see the module docstring).

    Args:
        config: the engine's settings.
        buffer_bytes: ``buffer_bytes(rows, length, fresh)``: the bytes the running rows' KV
            buffers take for ``rows`` rows of up to ``length`` columns (``fresh``: allocated for
            them from empty, not grown from the buffers there are now).
        bytes_per_token: bytes of KV one token takes (every layer's keys and values).
    """

    def __init__(
        self, config: EngineConfig, buffer_bytes: Callable[[int, int, bool], int], bytes_per_token: int
    ) -> None:
        self.config = config
        self.buffer_bytes = buffer_bytes
        self.bytes_per_token = bytes_per_token
        self.waiting: collections.deque[Row] = collections.deque()
        self.running: list[Row] = []  # in the order of the KV buffers' rows (the runner keeps it so)
        self.since_admit = 0  # decode steps since newcomers last joined
        self.peak_rows = 0
        self.peak_tokens_in_flight = 0
        self.budget_waits = 0

    def has_work(self, updates_waiting: bool) -> bool:
        """Rows to decode, or newcomers that may join (not while a weight update waits)."""
        return bool(self.running or (self.waiting and not updates_waiting))

    def kv_bytes(self, rows: Sequence[Row], newcomers: Sequence[Row] = (), fresh: bool = False) -> int:
        """Bytes of KV ``rows`` (the batch after admission) may take at their longest: the
        buffers at the longest row's budget (plus the columns compaction may leave in front),
        and ``newcomers``' KV once more while their prefill moves it into the buffers.
        ``fresh``: in buffers allocated for them alone (whether a request can ever fit)."""
        if not rows:
            return 0
        width = max(r.budget() for r in rows) + self.config.compact_every
        copy = len(newcomers) * max((len(r.prompt) for r in newcomers), default=0) * self.bytes_per_token
        return self.buffer_bytes(len(rows), width, fresh) + copy

    def admit(self, *, updates_waiting: bool) -> Admission:
        """Waiting rows that fit, in arrival order (a row that does not fit waits for room;
        one that cannot fit alone is refused)."""
        cfg = self.config
        if updates_waiting or not self.waiting:
            return Admission([])
        # a busy batch takes newcomers every admit_every steps, so their prefills run together
        if len(self.running) * 2 > cfg.max_rows and self.since_admit < cfg.admit_every:
            return Admission([])
        self.since_admit = 0
        used = sum(r.budget() for r in self.running)
        out: list[Row] = []
        refused: list[tuple[Row, Exception]] = []
        while self.waiting and len(self.running) + len(out) < cfg.max_rows:
            row = self.waiting[0]
            if row.future.cancelled():
                self.waiting.popleft()
                continue
            if cfg.memory_bytes and (alone := self.kv_bytes([row], [row], fresh=True)) > cfg.memory_bytes:
                self.waiting.popleft()
                refused.append((row, self._too_big(row, alone)))
                continue
            if (self.running or out) and used + row.budget() > cfg.max_tokens_in_flight:
                break
            if cfg.memory_bytes and self.kv_bytes([*self.running, *out, row], [*out, row]) > cfg.memory_bytes:
                self.budget_waits += 1
                break
            self.waiting.popleft()  # the future stays cancellable: a cancelled row leaves at its next step
            used += row.budget()
            out.append(row)
        self.peak_rows = max(self.peak_rows, len(self.running) + len(out))
        self.peak_tokens_in_flight = max(self.peak_tokens_in_flight, used)
        if not cfg.memory_bytes:
            return Admission(out, refused=refused)
        reserved = self.kv_bytes([*self.running, *out], out)
        return Admission(out, store_room=cfg.memory_bytes - reserved, reserved=reserved, refused=refused)

    def _too_big(self, row: Row, needs: int) -> ConfigError:
        cfg = self.config
        return ConfigError(
            f"a request of {len(row.prompt)} prompt tokens and max_tokens={row.params.max_tokens} needs "
            f"{needs / 1e9:.3f} GB of KV, over the sampler's memory budget of {cfg.memory_bytes / 1e9:.3f} GB "
            f"({cfg.budget_name}): raise the budget, or lower max_tokens or the prompt's length"
        )


#: What one more prefill pass costs, in padded token positions: on the project's 2-core machine
#: (bf16, the bundled model, 2026-12-05) a next-turn prefill took about 60 ms plus 1.3 ms per
#: position of its rows x its longest tail (one row of 17 tokens: 75 ms; 5 rows padded to 76:
#: 560 ms; 8 rows of 17-110 tokens padded to 110: 1.3 s).
PASS_COST_POSITIONS = 48


def split_by_length(items: list[Any], lengths: list[int]) -> list[list[Any]]:
    """``items`` in batches of similar ``lengths`` (each padded to its longest) that minimise
    padded positions plus :data:`PASS_COST_POSITIONS` per batch; shortest first. An exact
    partition of the sorted lengths into runs, by dynamic programming (a few dozen rows)."""
    if len(items) <= 1:
        return [items] if items else []
    order = sorted(range(len(items)), key=lambda i: lengths[i])
    L = [lengths[i] for i in order]
    best = [0.0] + [float("inf")] * len(L)  # best[j]: cost of the first j sorted items
    cut = [0] * (len(L) + 1)
    for j in range(1, len(L) + 1):
        for i in range(j):  # the last batch holds sorted items i .. j - 1, padded to L[j - 1]
            c = best[i] + PASS_COST_POSITIONS + (j - i) * L[j - 1]
            if c < best[j]:
                best[j], cut[j] = c, i
    parts, j = [], len(L)
    while j:
        parts.append([items[order[k]] for k in range(cut[j], j)])
        j = cut[j]
    return parts[::-1]


def resolve(fut: concurrent.futures.Future, result: Any = None, exc: BaseException | None = None) -> None:
    """Set ``fut``'s outcome unless its caller cancelled it meanwhile."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
