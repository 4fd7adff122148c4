"""The engine's model runner: prefill, decode and sampling over the running rows' KV.

:meth:`ModelRunner.prefill` runs newcomers (admitted by the :mod:`~skyrl_agent.policies._scheduler`)
and moves the ones that go on into the KV buffers (:class:`~skyrl_agent.policies._kv.Slots`);
:meth:`ModelRunner.decode` runs one forward step for every running row, samples, and lets
finished rows leave (their KV goes to the prefix store for the next turn). The running rows are
the scheduler's ``running`` list, which the runner keeps in the buffers' row order.

Reuse: a newcomer whose prompt starts with the tokens of an earlier finished row (the next turn
of an episode) takes that row's KV from the store and prefills only the new tokens. Newcomers
that arrive together (the samples of a GRPO group) are prefilled as one batch, their shared
prefix once.

Shared prefix (opt-in, ``cascade_min_tokens``, :mod:`skyrl_agent.policies._cascade`): when the
engine decodes with its bf16 weight copy, the KV of a prefix that newcomers share (a system
prompt, from a group prefill or the store) is kept once as a :class:`SharedPrefix`. Rows that
start with it drop those columns from their buffer rows (a row already running adopts it too)
and decode steps read the single copy; a finished row's stored KV gets the prefix's columns back
in front. A new prefix replaces the current one only when no running row reads it; a weight
change drops it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from skyrl_agent.policies._cascade import SharedPrefix, cascade_step
from skyrl_agent.policies._engine_config import EngineConfig, EngineStats
from skyrl_agent.policies._kv import KV, Past, PrefixStore, Slots, StoredKV
from skyrl_agent.policies._sampling import find_stop, prefill, sample_rows
from skyrl_agent.policies._scheduler import Row, Scheduler, resolve, split_by_length
from skyrl_agent.types import FinishReason, GenerateOutput

__all__ = ["ModelRunner"]

log = logging.getLogger(__name__)


class ModelRunner:
    """Runs the model for the engine's rows (see the module docstring).

    Args:
        run: the module the steps call (the bf16 weight copy, or the model itself).
        step: a lean decode step for ``run`` (:class:`~skyrl_agent.policies._llama_step.LlamaDecodeStep`)
            or None to decode through its forward.
        tokenizer: decodes outputs and finds stop strings.
        sched: the scheduler whose ``running`` rows this runner decodes.
        slots: the running rows' KV buffers.
        store: finished rows' KV for reuse.
        stats: the engine's counters (``lock`` guards the ones other threads read).
        cascade_on: whether rows may read a shared prefix's single copy of KV.
        additive_mask: decode masks as additive floats (attention functions other than SDPA's).
        full_width_decode: decode steps attend over the whole buffers (the opt-in matmul attention).
    """

    def __init__(
        self,
        run: Any,
        step: Any,
        tokenizer: Any,
        *,
        config: EngineConfig,
        eos_token_ids: frozenset[int],
        pad_token_id: int,
        cache_kwarg: str,
        sched: Scheduler,
        slots: Slots,
        store: PrefixStore,
        stats: EngineStats,
        lock: threading.Condition,
        cascade_on: bool,
        additive_mask: bool,
        full_width_decode: bool,
    ) -> None:
        self._run, self._step, self.tokenizer, self.config = run, step, tokenizer, config
        self.eos_token_ids, self.pad_token_id, self._cache_kwarg = eos_token_ids, pad_token_id, cache_kwarg
        self.sched, self.slots, self.store, self.stats, self._lock = sched, slots, store, stats, lock
        self.cascade_on, self._additive_mask, self._full_width_decode = (
            cascade_on,
            additive_mask,
            full_width_decode,
        )
        self.device = slots.device
        self.shared: SharedPrefix | None = None
        self.weights_key = 0  # the weights rows are admitted under (the engine keeps it current)
        self.reserved = 0  # bytes the scheduler reserved for this step's rows (byte budget)

    def store_room(self) -> int | None:
        """Bytes the prefix store may hold now under the byte budget (None: no budget)."""
        if not self.config.memory_bytes:
            return None
        # the running rows' buffers may still grow to their longest row's budget
        held = max(self.reserved, self.slots.nbytes(), self.sched.kv_bytes(self.sched.running))
        return self.config.memory_bytes - held

    # ------------------------------------------------------------------ prefill
    def prefill(self, rows: list[Row]) -> None:
        """Prefill newcomers, sample their first tokens and move the ones that go on into the batch.

        Newcomers whose prompts start with the same stored prefix (the samples of a group; prompts
        under one system prompt) run as one batch on top of it; the others as one fresh batch."""
        version = None if self.config.allow_stale_prefix else self.weights_key
        groups: dict[tuple[int, int] | None, list[Row]] = {}
        for row in rows:
            hit = self.store.find(row.prompt, version) if self.config.prefix_cache_bytes else None
            groups.setdefault(hit, []).append(row)
        fresh = groups.pop(None, [])
        # Every hit's KV is taken before any prefill runs: a prefill stores prefixes (put), which
        # may evict an entry found above. Ascending length: an entry used in part by one group and
        # whole by another (which removes it) hands out its part first.
        hits: list[tuple[list[Row], int, StoredKV]] = []
        for (key, n), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
            got = self.store.take_found(key, n)
            if got is None:  # gone since find (cannot happen while takes precede prefills)
                fresh += members
                continue
            self.stats.reused_tokens += n * len(members)
            hits.append((members, n, got))
            if got.head is None:  # (a head is a shared prefix's columns: offered when it was made)
                self._offer_shared(members[0].prompt[:n], got.kv, version)
        if fresh:
            self._prefill_isolated(fresh, [r.prompt for r in fresh], [])
        # Next turns of episodes under the shared prefix run over their pasts without it, which
        # the attention reads once for all of them (_cascade._prefill_over_prefix); the others
        # over their whole pasts. The cascaded ones run first: a plain prefill may offer a new
        # shared prefix (_offer_shared), which it may take only while no running row reads the
        # current one. Entries: (row, tokens of its prompt the past covers, past).
        N = len(self.shared.ids) if self.shared is not None else 0
        batches: dict[bool, list[tuple[Row, int, Past]]] = {True: [], False: []}
        groups: dict[bool, list[tuple[list[Row], int, Past]]] = {True: [], False: []}
        for members, n, got in hits:
            own = self._after_shared(members[0], n, got)
            past = (n, got.full()) if own is None else own
            if len(members) > 1:  # one past for all: it runs once, repeated
                groups[own is not None].append((members, n, past))
            else:
                batches[own is not None].append((members[0], n, past))
        for over in (True, False):
            if over:
                self.stats.cascade_prefill_rows += len(batches[True]) + sum(
                    len(m) for m, _, _ in groups[True]
                )
            for members, n, past in groups[over]:
                self._prefill_isolated(
                    members, [r.prompt[n:] for r in members], [past] * len(members), N * over
                )
            # next turns of different episodes: batches over their padded pasts, split where the
            # padding of short tails to the longest would cost more than another pass
            batch = batches[over]
            for part in split_by_length(batch, [len(r.prompt) - n for r, n, _ in batch]):
                self._prefill_isolated(
                    [r for r, _, _ in part],
                    [r.prompt[n:] for r, n, _ in part],
                    [p for _, _, p in part],
                    N * over,
                )

    def _after_shared(self, row: Row, n: int, got: StoredKV) -> Past | None:
        """``(n - N, the columns after the shared prefix)`` when ``row``'s past of ``n`` stored
        columns starts with the whole shared prefix (``N`` tokens, the same weights), else None.
        A past stored over a head of at least ``N`` columns gives them without copying the head."""
        shared = self.shared
        if shared is None or not self.cascade_on or self.device.type != "cpu":
            return None
        N = len(shared.ids)
        if n <= N or row.version != shared.version or shared.shared_with(row.prompt) != N:
            return None
        if got.head is not None and got.head_n >= N:
            if got.head_n == N:
                return n - N, got.kv
            m = got.head_n
            return n - N, [
                (torch.cat([hk[:, :, N:m], k], 2), torch.cat([hv[:, :, N:m], v], 2))
                for (hk, hv), (k, v) in zip(got.head, got.kv, strict=True)
            ]
        kv = got.full()
        return n - N, [(k[:, :, N:n], v[:, :, N:n]) for k, v in kv]

    def _offer_shared(self, ids: list[int], kv: KV, version: int | None) -> None:
        """Make ``ids`` (with its KV, computed with weights ``version``) the prefix rows read from
        one copy, unless a running row still reads the current one or it is too short. Offers
        that start like the current prefix narrow it to what both share (the system prompt
        of prompts that go on with different questions)."""
        if not self.cascade_on or version is None or len(ids) < self.config.cascade_min_tokens:
            return
        if self.shared is not None and any(r.shared_n for r in self.sched.running):
            return
        current = self.shared
        if current is not None and current.version == version:
            n = current.shared_with(ids)
            if n == len(current.ids):
                return
            if n >= self.config.cascade_min_tokens:  # e.g. two questions: keep what they share
                self.shared = SharedPrefix.from_kv(ids[:n], current.stored, version)
                return
        self.shared = SharedPrefix.from_kv(ids, kv, version)
        self._adopt_shared()

    def _adopt_shared(self) -> None:
        """Running rows that start with the new shared prefix (a request that arrived alone just
        before the rest of its batch) drop their copy of its columns and read the shared one:
        otherwise their long rows would keep every row's buffers as wide as before."""
        shared, slots = self.shared, self.slots
        if shared is None or not self.sched.running:
            return
        adopted = False
        for b, row in enumerate(self.sched.running):
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
        rows: list[Row],
        tails: list[list[int]],
        pasts: list[Past],
        over_shared: int = 0,
    ) -> None:
        """:meth:`_run_prefill`; when a group fails, each row runs alone on its whole prompt, so
        only the row at fault gets the error (the running rows are not touched by a prefill)."""
        try:
            self._run_prefill(rows, tails, pasts, over_shared)
        except Exception as exc:  # noqa: BLE001 - handed to the row(s) at fault
            if len(rows) == 1 and not pasts:
                resolve(rows[0].future, exc=exc)
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

    def _past_cache(self, pasts: list[Past]) -> tuple[Any, int, torch.Tensor | None]:
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
        for i in range(self.slots.layers):
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
        rows: list[Row],
        tails: list[list[int]],
        pasts: list[Past],
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
            if self.shared is None or len(self.shared.ids) != over_shared:  # the rows retry alone
                raise RuntimeError("the shared prefix changed before a prefill over it")
            offset, over = over_shared, cascade_step(self.shared, None)
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
        self.stats.prefill_tokens += shared + sum(len(x) - shared for x in run)
        self.stats.prefills += 1
        # the columns every row has in common, stored for prompts that start the same way
        common = past_len + (shared or (len(run[0]) if B > 1 and len(run) == 1 else 0))
        # (not over the shared prefix: that KV lacks the prefix's columns)
        if common > past_len and not over_shared and (self.config.prefix_cache_bytes or self.cascade_on):
            common_kv = [
                (lay.keys[:1, :, :common].clone(), lay.values[:1, :, :common].clone()) for lay in cache.layers
            ]
            if self.config.prefix_cache_bytes:
                self.store.put(rows[0].prompt[:common], common_kv, rows[0].version, room=self.store_room())
            self._offer_shared(rows[0].prompt[:common], common_kv, rows[0].version)
        for r in rows:
            r.next_pos = len(r.prompt)
        keep = self._sample(rows, logits_BV)
        for row in rows:
            if row.finish is not None:
                self.finish(row)
        if not keep:
            return
        sel = [row_of[j] for j in keep]
        valid = attn_BT
        if len(keep) < B:
            valid = valid.index_select(0, torch.as_tensor(keep, device=dev))
        shared = self.shared
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
        # the leading columns no row keeps (a shared prefix read from one copy) are cut before
        # the rows of a group are copied out of their one run: 64 rows of the main job copied
        # their 600-column prompt each (about 1 GB) to keep 100 columns
        used = valid.any(0).nonzero()
        lead = int(used[0]) if len(used) else valid.shape[1]
        layers = [(layer.keys[:, :, lead:], layer.values[:, :, lead:]) for layer in cache.layers]
        valid = valid[:, lead:]
        if sel != list(range(len(run))):
            idx = torch.as_tensor(sel, device=dev)
            layers = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in layers]
        self.slots.insert(layers, valid)
        self.sched.running += [rows[j] for j in keep]

    # ------------------------------------------------------------------ decode
    def decode(self) -> None:
        slots, rows = self.slots, self.sched.running
        if slots.t + 1 > slots.cap_len:
            slots.compact(1)
        slots.ensure(slots.rows, slots.t + 1)
        dev = self.device
        tokens = torch.as_tensor([r.new_ids[-1] for r in rows], dtype=torch.long, device=dev)[:, None]
        pos = torch.as_tensor([r.next_pos for r in rows], dtype=torch.long, device=dev)[:, None]
        slots.full_width = self._full_width_decode
        shared_n = [r.shared_n for r in rows]
        cascade: contextlib.AbstractContextManager = contextlib.nullcontext()
        if self.shared is not None and any(shared_n):
            N = len(self.shared.ids)
            reads_BN = None  # every row reads the whole prefix: nothing to mask
            if any(n != N for n in shared_n):
                reads_BN = (
                    torch.arange(N, device=dev)[None, :] < torch.as_tensor(shared_n, device=dev)[:, None]
                )
            cascade = cascade_step(self.shared, reads_BN)
            self.stats.cascade_rows_decoded += sum(1 for n in shared_n if n)
            self.stats.cascade_columns_saved += sum(shared_n)
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
        self.stats.decode_steps += 1
        self.sched.since_admit += 1
        self.stats.rows_decoded += len(rows)
        keep = set(self._sample(rows, logits_BV.float()))
        for j in range(len(rows) - 1, -1, -1):  # from the end: a removal moves the last row
            if j not in keep:
                self._leave(j)
        slots.compact(self.config.compact_every)

    def _leave(self, j: int) -> None:
        """Row ``j`` of the batch is done: store its KV (before its caller hears of it, so the
        next turn finds it), resolve it, drop it (the last row takes its place)."""
        row = self.sched.running[j]
        if self.config.prefix_cache_bytes and (
            row.version == self.weights_key or self.config.allow_stale_prefix
        ):
            kv = self.slots.extract(j)
            ids = row.prompt + row.new_ids[:-1]  # the last token was sampled, never run
            if row.shared_n and self.shared is not None:  # the shared prefix's columns, by reference
                n, pre = row.shared_n, self.shared.stored
                own = kv or [(pk[:, :, :0], pv[:, :, :0]) for pk, pv in pre]
                self.store.put(ids, own, row.version, room=self.store_room(), head=pre, head_n=n)
            elif kv is not None:
                self.store.put(ids, kv, row.version, room=self.store_room())
        self.finish(row)
        self.slots.remove(j)
        last = self.sched.running.pop()
        if j < len(self.sched.running):
            self.sched.running[j] = last

    # ------------------------------------------------------------------ sampling
    def _sample(self, rows: list[Row], logits_BV: torch.Tensor) -> list[int]:
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
            self.stats.generated_tokens += 1
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

    def finish(self, row: Row) -> None:
        with self._lock:
            self.stats.requests += 1
            self.stats.prompt_tokens += len(row.prompt)
        if row.finish == FinishReason.ABORT and row.deadline is not None and time.monotonic() > row.deadline:
            resolve(row.future, exc=TimeoutError("the generation ran past its deadline"))
            return
        ids, p = row.new_ids, row.params
        text_ids = ids[:-1] if ids and ids[-1] in self.eos_token_ids and not p.ignore_eos else ids
        resolve(
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

    def fail_all(self, rows: Sequence[Row], exc: BaseException) -> None:
        """``rows`` get ``exc``; the batch starts over empty."""
        for row in rows:
            resolve(row.future, exc=exc)
        self.sched.running.clear()
        self.slots.release()
