"""Loaded by every Python process the docs test starts: no connection leaves this machine.

The docs test puts this directory on ``PYTHONPATH``, so code blocks, the commands of ``bash run``
blocks and the servers they start can reach 127.0.0.1 and Unix sockets (Docker), nothing else.
"""

import ipaddress
import socket

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _local(address):
    if not isinstance(address, tuple):
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _connect(self, address):
    if not _local(address):
        raise ConnectionRefusedError(f"docs blocks may only connect to 127.0.0.1; blocked {address!r}")
    return _real_connect(self, address)


def _connect_ex(self, address):
    if not _local(address):
        raise ConnectionRefusedError(f"docs blocks may only connect to 127.0.0.1; blocked {address!r}")
    return _real_connect_ex(self, address)


socket.socket.connect = _connect
socket.socket.connect_ex = _connect_ex
