"""Rectangular grids of cells with walls."""

from gridcore.grid import Grid

__all__ = ["Grid"]
