"""Shortest paths on gridcore grids."""

from gridpath.bfs import distance, shortest_path

__all__ = ["distance", "shortest_path"]
