import pytest

from pocketlib.intervals import merge, total_length


def test_merge_overlapping():
    assert merge([(1, 4), (2, 6), (8, 9)]) == [(1, 6), (8, 9)]


def test_merge_unsorted_input():
    assert merge([(8, 9), (1, 2)]) == [(1, 2), (8, 9)]


def test_merge_rejects_reversed():
    with pytest.raises(ValueError):
        merge([(3, 1)])


def test_total_length():
    assert total_length([(0, 2), (1, 5), (10, 11)]) == 6


def test_merge_touching_intervals():
    assert merge([(1, 3), (3, 5)]) == [(1, 5)]


def test_merge_chain_of_touching():
    assert merge([(3, 4), (1, 2), (2, 3)]) == [(1, 4)]
