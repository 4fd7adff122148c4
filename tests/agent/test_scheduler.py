"""The engine's scheduler without a model: admission by rows, tokens, bytes and ``admit_every``,
cancelled and refused requests, and what the prefix store is left."""

from __future__ import annotations

import concurrent.futures

import pytest

from skyrl_agent.policies._engine_config import EngineConfig
from skyrl_agent.policies._scheduler import Row, Scheduler
from skyrl_agent.types import GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError

BYTES_PER_TOKEN = 100


def _buffer_bytes(rows: int, length: int, fresh: bool = False) -> int:
    return rows * length * BYTES_PER_TOKEN


def _row(prompt: int, max_tokens: int) -> Row:
    request = GenerateRequest(list(range(prompt)), SamplingParams(max_tokens=max_tokens))
    return Row(request, concurrent.futures.Future(), None, None, list(range(prompt)))


def _scheduler(**kw) -> Scheduler:
    return Scheduler(EngineConfig(**{"compact_every": 0, **kw}), _buffer_bytes, BYTES_PER_TOKEN)


def test_rows_join_in_arrival_order_up_to_max_rows():
    s = _scheduler(max_rows=3, admit_every=1)
    rows = [_row(10, 5) for _ in range(5)]
    s.waiting.extend(rows)
    got = s.admit(updates_waiting=False)
    assert got.rows == rows[:3] and list(s.waiting) == rows[3:]
    assert got.store_room is None and got.reserved == 0  # no byte budget
    s.running += got.rows
    assert s.admit(updates_waiting=False).rows == []  # full
    s.running.pop()
    s.since_admit = 1  # a decode step ran since the last admission
    assert s.admit(updates_waiting=False).rows == [rows[3]]
    assert s.peak_rows == 3


def test_tokens_in_flight_bound_admits_a_lone_long_row():
    s = _scheduler(max_tokens_in_flight=100)
    a, b, c = _row(50, 20), _row(40, 20), _row(500, 10)
    s.waiting.extend([a, b])
    assert s.admit(updates_waiting=False).rows == [a]  # 70 + 60 > 100
    s.running = []
    s.waiting.clear()
    s.waiting.append(c)
    assert s.admit(updates_waiting=False).rows == [c]  # alone, a row always runs without a byte budget
    assert s.peak_tokens_in_flight == 510


def test_nothing_joins_while_a_weight_update_waits():
    s = _scheduler()
    s.waiting.append(_row(10, 5))
    assert not s.has_work(updates_waiting=True)
    assert s.admit(updates_waiting=True).rows == []
    assert s.has_work(updates_waiting=False)


def test_a_busy_batch_takes_newcomers_every_admit_every_steps():
    s = _scheduler(max_rows=4, admit_every=3)
    s.running = [_row(10, 5) for _ in range(3)]  # more than half of max_rows
    s.waiting.append(_row(10, 5))
    s.since_admit = 2
    assert s.admit(updates_waiting=False).rows == []
    s.since_admit = 3
    assert len(s.admit(updates_waiting=False).rows) == 1 and s.since_admit == 0
    s.running = [_row(10, 5)]  # half or fewer: at once
    s.waiting.append(_row(10, 5))
    assert len(s.admit(updates_waiting=False).rows) == 1


def test_cancelled_requests_are_dropped_before_they_run():
    s = _scheduler()
    gone, kept = _row(10, 5), _row(10, 5)
    gone.future.cancel()
    s.waiting.extend([gone, kept])
    assert s.admit(updates_waiting=False).rows == [kept] and not s.waiting


def test_byte_budget_counts_rows_times_the_longest_row_and_the_prefill_copy():
    s = _scheduler()
    a, b = _row(90, 10), _row(40, 10)
    # the buffers: 2 rows x 100 columns; the prefill's copy: 2 newcomers x their longest prompt (90)
    assert s.kv_bytes([a, b], [a, b]) == (2 * 100 + 2 * 90) * BYTES_PER_TOKEN
    assert s.kv_bytes([a, b]) == 2 * 100 * BYTES_PER_TOKEN  # running only
    assert s.kv_bytes([]) == 0


def test_byte_budget_holds_newcomers_back_and_leaves_the_store_the_rest():
    budget = 600 * BYTES_PER_TOKEN
    s = _scheduler(memory_bytes=budget)
    rows = [_row(90, 10) for _ in range(4)]
    s.waiting.extend(rows)
    got = s.admit(updates_waiting=False)
    # one: 100 + 90 = 190; two: 200 + 180 = 380; three: 300 + 270 = 570; four: 400 + 360 > 600
    assert got.rows == rows[:3] and s.budget_waits == 1
    assert got.reserved == 570 * BYTES_PER_TOKEN and got.store_room == budget - got.reserved
    s.running += got.rows  # decoding: the fourth needs 400 + 90 = 490 columns' worth, it fits
    assert s.admit(updates_waiting=False).rows == [rows[3]]


def test_a_request_that_cannot_fit_alone_is_refused_with_the_budget_named():
    s = Scheduler(
        EngineConfig(memory_bytes=100 * BYTES_PER_TOKEN, compact_every=0, budget_name="--sampler-memory-gb"),
        _buffer_bytes,
        BYTES_PER_TOKEN,
    )
    big, small = _row(80, 10), _row(20, 10)  # alone: 90 + 80 > 100; 30 + 20 fits
    s.waiting.extend([big, small])
    got = s.admit(updates_waiting=False)
    assert got.rows == [small]
    ((row, exc),) = got.refused
    assert row is big and isinstance(exc, ConfigError)
    assert (
        "--sampler-memory-gb" in str(exc) and "max_tokens=10" in str(exc) and "80 prompt tokens" in str(exc)
    )


def test_memory_bytes_must_not_be_negative():
    with pytest.raises(ConfigError, match="memory_bytes"):
        EngineConfig(memory_bytes=-1)


def test_a_request_waits_for_room_the_buffers_hold_now_instead_of_being_refused():
    """Whether a request can ever fit is judged on buffers allocated for it alone; buffers grown
    by an earlier batch only make it wait."""
    held = {"bytes": 0}

    def grown(rows: int, length: int, fresh: bool = False) -> int:
        need = rows * length * BYTES_PER_TOKEN
        return need if fresh else max(need, held["bytes"])

    s = Scheduler(EngineConfig(memory_bytes=1000 * BYTES_PER_TOKEN, compact_every=0), grown, BYTES_PER_TOKEN)
    s.running = [_row(10, 10)]
    row = _row(20, 10)  # alone: 30 columns + 20 for its prefill
    s.waiting.append(row)
    held["bytes"] = 990 * BYTES_PER_TOKEN  # an earlier, larger batch left the buffers this big
    got = s.admit(updates_waiting=False)
    assert got.rows == [] and not got.refused and list(s.waiting) == [row] and s.budget_waits == 1
    held["bytes"] = 900 * BYTES_PER_TOKEN
    s.since_admit = 1
    got = s.admit(updates_waiting=False)
    assert got.rows == [row] and got.reserved == 920 * BYTES_PER_TOKEN
