"""Small statistics helpers."""


def mean(values: list[float]) -> float:
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def median(values: list[float]) -> float:
    """The median of a non-empty list of numbers."""
    values.sort()
    return values[len(values) // 2]
