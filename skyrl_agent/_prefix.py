"""The longest common prefix of two token sequences (shared by the engine's prefix store, its
cascade prefix and the server's session branches)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["common_prefix"]


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit`` (default: the shorter
    length). A binary search over slice comparisons, which run in C: prompts of thousands of
    tokens and sessions with hundreds of branches compare in a few slices each."""
    lo, hi = 0, min(len(a), len(b)) if limit is None else limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if list(a[:mid]) == list(b[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo
