"""A least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    """Keeps at most ``capacity`` items; the least recently used one is evicted first."""

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items = OrderedDict()

    def get(self, key, default=None):
        """The value for ``key`` (which becomes the most recently used), or ``default``."""
        if key not in self._items:
            return default
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key, value):
        """Store ``value`` under ``key``, evicting the least recently used item if full."""
        if key in self._items:
            self._items.move_to_end(key)
        self._items[key] = value
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self):
        return len(self._items)

    def __contains__(self, key):
        return key in self._items

    def keys(self):
        """Keys from least to most recently used."""
        return list(self._items)
