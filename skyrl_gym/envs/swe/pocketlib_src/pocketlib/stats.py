"""Descriptive statistics of a sequence of numbers."""


def mean(values):
    """The arithmetic mean."""
    values = list(values)
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """The middle value; the mean of the two middle values for an even count."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of an empty sequence")
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def value_range(values):
    """Largest minus smallest value."""
    values = list(values)
    if not values:
        raise ValueError("range of an empty sequence")
    return max(values) - min(values)
