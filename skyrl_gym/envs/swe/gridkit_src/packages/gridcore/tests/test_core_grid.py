import pytest

from gridcore import Grid


def test_parse_reads_walls():
    g = Grid.parse("..#\n...")
    assert (g.width, g.height) == (3, 2) and g.walls == {(2, 0)}


def test_walls_outside_are_refused():
    with pytest.raises(ValueError):
        Grid(2, 2, walls=[(2, 0)])


def test_neighbors_in_the_middle():
    assert sorted(Grid(3, 3).neighbors((1, 1))) == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_cells_skip_walls():
    assert Grid.parse(".#\n..").cells() == [(0, 0), (0, 1), (1, 1)]


def test_neighbors_stay_inside_the_grid():
    g = Grid(3, 2)
    assert sorted(g.neighbors((2, 1))) == [(1, 1), (2, 0)]
    assert sorted(g.neighbors((0, 0), diagonal=True)) == [(0, 1), (1, 0), (1, 1)]
