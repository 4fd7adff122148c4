"""Dotted version strings such as ``1.10.2``."""


def parse(version):
    """The numeric parts of ``version`` as a tuple of ints."""
    parts = version.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in parts)


def compare(a, b):
    """-1, 0 or 1 as version ``a`` is older than, equal to or newer than ``b``."""
    left = [int(p) for p in a.split(".")]
    right = [int(p) for p in b.split(".")]
    width = max(len(left), len(right))
    left += [0] * (width - len(left))
    right += [0] * (width - len(right))
    return (left > right) - (left < right)


def latest(versions):
    """The newest of ``versions``."""
    best = None
    for v in versions:
        if best is None or compare(v, best) > 0:
            best = v
    return best
