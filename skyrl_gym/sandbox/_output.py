"""Bounded output capture: keep the first and last halves, count the rest, mark the cut."""

from __future__ import annotations

__all__ = ["HeadTail", "marker"]


def marker(omitted: int) -> bytes:
    """The text that stands for ``omitted`` bytes cut out of the middle."""
    return f"\n[... {omitted} bytes of output omitted ...]\n".encode()


class HeadTail:
    """Collects a byte stream in bounded memory: the first ``cap // 2`` bytes and the last
    ``cap - cap // 2`` bytes, whatever the stream's length."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Add the next chunk of the stream."""
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self.tail_cap:
            self.tail = bytearray(data[-self.tail_cap :])
        else:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        """True when bytes were dropped from the middle."""
        return self.total > len(self.head) + len(self.tail)

    def getvalue(self) -> bytes:
        """The kept bytes, with a marker where the middle was cut."""
        if not self.truncated:
            return bytes(self.head + self.tail)
        return bytes(self.head) + marker(self.total - len(self.head) - len(self.tail)) + bytes(self.tail)

    def text(self) -> str:
        """:meth:`getvalue` decoded as UTF-8, invalid bytes replaced."""
        return self.getvalue().decode("utf-8", errors="replace")
