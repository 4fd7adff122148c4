"""A grid of ``width`` x ``height`` cells; ``(x, y)`` with ``0 <= x < width``, ``0 <= y < height``."""

STRAIGHT = ((1, 0), (-1, 0), (0, 1), (0, -1))
DIAGONAL = ((1, 1), (1, -1), (-1, 1), (-1, -1))


class Grid:
    def __init__(self, width, height, walls=()):
        if width < 1 or height < 1:
            raise ValueError("a grid has at least one cell")
        self.width, self.height = width, height
        self.walls = set(walls)
        for cell in self.walls:
            if not self.inside(cell):
                raise ValueError(f"wall {cell} is outside the grid")

    @classmethod
    def parse(cls, text):
        """A grid from rows of text: ``#`` is a wall, anything else a free cell."""
        rows = [line for line in text.strip().splitlines()]
        walls = [(x, y) for y, row in enumerate(rows) for x, ch in enumerate(row) if ch == "#"]
        return cls(max(len(r) for r in rows), len(rows), walls)

    def inside(self, cell):
        x, y = cell
        return 0 <= x < self.width and 0 <= y < self.height

    def free(self, cell):
        return self.inside(cell) and cell not in self.walls

    def neighbors(self, cell, diagonal=False):
        """The free cells next to ``cell`` (and the diagonal ones when ``diagonal``)."""
        steps = STRAIGHT + DIAGONAL if diagonal else STRAIGHT
        x, y = cell
        return [(x + dx, y + dy) for dx, dy in steps if self.free((x + dx, y + dy))]

    def cells(self):
        """Every free cell, row by row."""
        return [(x, y) for y in range(self.height) for x in range(self.width) if (x, y) not in self.walls]
