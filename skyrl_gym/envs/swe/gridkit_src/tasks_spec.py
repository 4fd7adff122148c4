"""The bug-fix history of gridkit, read by ``skyrl_gym/envs/swe/_make_bundle.py``.

Two packages in one repository (``packages/gridcore``, ``packages/gridpath`` depending on it),
each with ``src/`` and ``tests/``; the tests run with both source folders on the path. The second
task's bug is in gridcore and only gridpath's tests show it. Same shape as pocketlib's spec.
"""

TASKS = [
    {
        "name": "neighbors-outside",
        "problem_statement": """\
Grid.neighbors returns a cell below the last row

    >>> from gridcore import Grid
    >>> Grid(3, 2).neighbors((2, 1))
    [(1, 1), (2, 2), (2, 0)]

(2, 2) is not a cell of a grid of height 2. `Grid.inside` seems to accept y == height, so
`free` does too, and shortest paths can walk off the bottom edge.
""",
        "fix": [
            (
                "packages/gridcore/src/gridcore/grid.py",
                "return 0 <= x < self.width and 0 <= y < self.height",
                "return 0 <= x < self.width and 0 <= y <= self.height",
            )
        ],
        "tests": {"packages/gridcore/tests/test_core_grid.py": ["test_neighbors_stay_inside_the_grid"]},
    },
    {
        "name": "diagonal-up-left",
        "problem_statement": """\
gridpath: diagonal shortest paths are too long in one direction

With `diagonal=True`, `distance(Grid(3, 3), (0, 0), (2, 2), diagonal=True)` is 2 as expected,
but from (2, 2) back to (0, 0) it is 4. Moving up and to the left diagonally never seems to be
taken.
""",
        "fix": [
            (
                "packages/gridcore/src/gridcore/grid.py",
                "DIAGONAL = ((1, 1), (1, -1), (-1, 1), (-1, -1))",
                "DIAGONAL = ((1, 1), (1, -1), (-1, 1))",
            )
        ],
        "tests": {"packages/gridpath/tests/test_path_bfs.py": ["test_diagonal_moves_in_every_direction"]},
    },
]
