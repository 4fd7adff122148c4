"""The prefix store holds a shared prefix's columns once, by reference, for every row stored
over it (skyrl_agent.policies._kv.PrefixStore with heads)."""

import torch

from skyrl_agent.policies._kv import PrefixStore


def _kv(n, value=0.0, layers=2):
    return [(torch.full((1, 1, n, 2), value), torch.full((1, 1, n, 2), -value)) for _ in range(layers)]


def test_a_head_counts_once_and_goes_with_its_last_entry():
    head = _kv(10, 1.0)  # 2 layers x (keys + values) x 10 x 2 floats = 320 bytes
    store = PrefixStore(max_bytes=10_000, min_tokens=1)
    prefix = list(range(10))
    store.put(prefix + [20, 21], _kv(2, 2.0), version=0, head=head, head_n=10)  # 64 own bytes
    store.put(prefix + [30, 31, 32], _kv(3, 3.0), version=0, head=head, head_n=10)  # 96
    assert store.nbytes == 320 + 64 + 96  # the head once
    n, kv = store.take(prefix + [20, 21, 99], version=0)  # used whole: removed, the head stays
    assert n == 12 and kv[0][0].shape == (1, 1, 12, 2)
    assert torch.equal(kv[0][0][0, 0, :10], head[0][0][0, 0])
    assert torch.equal(kv[1][1][0, 0, 10:], torch.full((2, 2), -2.0))
    assert store.nbytes == 320 + 96
    store.shrink_to(0)
    assert store.nbytes == 0 and len(store) == 0


def test_taking_part_of_an_entry_over_a_head():
    head = _kv(10, 1.0)
    store = PrefixStore(max_bytes=10_000, min_tokens=1)
    ids = list(range(15))
    store.put(ids, _kv(5, 2.0), version=0, head=head, head_n=10)
    key, n = store.find(list(range(8)) + [99], version=0)
    inside = store.take_found(key, n)  # within the head: its columns alone, no head left over
    assert n == 8 and inside.head is None and inside.kv[0][0].shape == (1, 1, 8, 2)
    key, n = store.find(list(range(13)) + [99], version=0)
    part = store.take_found(key, n)  # past the head: the head by reference, 3 own columns
    assert n == 13 and part.head is head and part.head_n == 10 and part.kv[0][0].shape == (1, 1, 3, 2)
    full = part.full()
    assert full[0][0].shape == (1, 1, 13, 2)
    assert torch.equal(full[0][0][0, 0, :10], head[0][0][0, 0, :10])
    assert torch.equal(full[0][0][0, 0, 10:], torch.full((3, 2), 2.0))
    assert len(store) == 1  # used in part: kept


def test_eviction_makes_room_counting_the_head_it_brings():
    head = _kv(10, 1.0)  # 320 bytes
    store = PrefixStore(max_bytes=500, min_tokens=1)
    store.put([1] * 12, _kv(12), version=0)  # 384 bytes, no head
    store.put(list(range(12)), _kv(2), version=0, head=head, head_n=10)  # 64 + 320: evicts the first
    assert len(store) == 1 and store.evictions == 1 and store.nbytes == 384
    store.put(list(range(10)) + [7, 7, 7], _kv(3), version=0, head=head, head_n=10)  # + 96: fits
    assert len(store) == 2 and store.nbytes == 480
    big = _kv(20)  # 640 bytes alone: over the bound, not kept, nothing evicted
    store.put([5] * 20, big, version=0)
    assert len(store) == 2 and store.nbytes == 480
