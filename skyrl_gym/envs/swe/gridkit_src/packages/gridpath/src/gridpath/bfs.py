"""Breadth-first search: every step costs the same."""

from collections import deque


def shortest_path(grid, start, goal, diagonal=False):
    """The cells from ``start`` to ``goal`` (both included) on a shortest path; None if there is none."""
    if not grid.free(start) or not grid.free(goal):
        return None
    came_from = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = []
            while cell is not None:
                path.append(cell)
                cell = came_from[cell]
            return path[::-1]
        for nxt in grid.neighbors(cell, diagonal=diagonal):
            if nxt not in came_from:
                came_from[nxt] = cell
                queue.append(nxt)
    return None


def distance(grid, start, goal, diagonal=False):
    """Steps on a shortest path; -1 if there is none."""
    path = shortest_path(grid, start, goal, diagonal=diagonal)
    return -1 if path is None else len(path) - 1
