from gridcore import Grid
from gridpath import distance, shortest_path

MAZE = """\
....
.##.
...#
#...
"""


def test_path_around_walls():
    g = Grid.parse(MAZE)
    path = shortest_path(g, (0, 0), (3, 3))
    assert path[0] == (0, 0) and path[-1] == (3, 3) and len(path) == 7
    assert all(g.free(c) for c in path)


def test_no_path():
    g = Grid.parse(".#.\n.#.")
    assert shortest_path(g, (0, 0), (2, 0)) is None and distance(g, (0, 0), (2, 0)) == -1


def test_start_on_a_wall():
    assert shortest_path(Grid.parse("#."), (0, 0), (1, 0)) is None


def test_diagonal_moves_in_every_direction():
    g = Grid(3, 3)
    assert distance(g, (0, 0), (2, 2), diagonal=True) == 2
    assert distance(g, (2, 0), (0, 2), diagonal=True) == 2
    assert distance(g, (2, 2), (0, 0), diagonal=True) == 2
