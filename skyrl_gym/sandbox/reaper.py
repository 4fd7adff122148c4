"""Labels on everything the sandbox layer creates, and the reaper that removes leftovers.

Every container (and any network or volume) carries ``skyrl.sandbox=1`` plus its owner's
identity: pid, process start time and boot id (so a reused pid is not mistaken for the owner),
host name, creation time and time-to-live. :func:`reap` removes what belongs to a dead owner
on this host, and anything past its time-to-live whoever owns it. It runs when a process first
creates a Docker sandbox, and as ``skyrl sandbox reap``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any

__all__ = [
    "LABEL",
    "owner_labels",
    "owner_alive",
    "reap",
    "ReapReport",
    "list_labelled",
]

log = logging.getLogger(__name__)

LABEL = "skyrl.sandbox"
L_PID = "skyrl.owner.pid"
L_START = "skyrl.owner.start"
L_BOOT = "skyrl.owner.boot_id"
L_HOST = "skyrl.owner.host"
L_CREATED = "skyrl.created"
L_TTL = "skyrl.ttl_s"


@cache
def boot_id() -> str:
    """This machine's boot id (changes at every boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None  # a zombie is dead for our purposes
    return fields[19].decode()


def owner_labels(ttl_s: float, pid: int | None = None) -> dict[str, str]:
    """The labels that tie a created object to this process (or ``pid``)."""
    pid = os.getpid() if pid is None else pid
    return {
        LABEL: "1",
        L_PID: str(pid),
        L_START: process_start(pid) or "",
        L_BOOT: boot_id(),
        L_HOST: socket.gethostname(),
        L_CREATED: f"{time.time():.3f}",
        L_TTL: f"{ttl_s:.0f}",
    }


def owner_alive(labels: dict[str, str]) -> bool | None:
    """True if the owning process still runs, False if it is gone, None if it cannot be known
    here (another host)."""
    if labels.get(L_HOST) != socket.gethostname():
        return None
    if labels.get(L_BOOT) != boot_id():
        return False
    try:
        pid = int(labels.get(L_PID, ""))
    except ValueError:
        return False
    start = process_start(pid)
    return start is not None and start == labels.get(L_START)


def _expired(labels: dict[str, str], now: float) -> bool:
    try:
        return now > float(labels[L_CREATED]) + float(labels[L_TTL])
    except (KeyError, ValueError):
        return False


@dataclass
class ReapReport:
    """What :func:`reap` removed."""

    containers: list[str] = field(default_factory=list)
    """Names of removed containers."""
    networks: list[str] = field(default_factory=list)
    """Names of removed networks."""
    volumes: list[str] = field(default_factory=list)
    """Names of removed volumes."""

    @property
    def total(self) -> int:
        return len(self.containers) + len(self.networks) + len(self.volumes)


def list_labelled(client: Any) -> dict[str, list[Any]]:
    """Every container, network and volume carrying the sandbox label."""
    flt = {"label": LABEL}
    return {
        # a container removed between the listing and its inspection is simply gone
        "containers": client.containers.list(all=True, filters=flt, ignore_removed=True),
        "networks": client.networks.list(filters=flt),
        "volumes": client.volumes.list(filters=flt),
    }


def _doomed(labels: dict[str, str], now: float, everything: bool) -> bool:
    return everything or _expired(labels, now) or owner_alive(labels) is False


def reap(client: Any | None = None, *, everything: bool = False) -> ReapReport:
    """Remove labelled containers, networks and volumes whose owner is dead or whose
    time-to-live ran out (``everything=True``: all of them). Returns what was removed."""
    from skyrl_gym.sandbox.dockerlib import docker_client, docker_module

    client = client or docker_client()
    errors = docker_module().errors
    now = time.time()
    report = ReapReport()
    found = list_labelled(client)
    for c in found["containers"]:
        if _doomed(c.labels, now, everything):
            try:
                c.remove(force=True, v=True)
                report.containers.append(c.name)
            except errors.NotFound:
                pass
            except errors.APIError as exc:
                if "already in progress" not in str(exc):
                    log.warning("reaper: could not remove container %s: %s", c.name, exc)
    for kind in ("networks", "volumes"):
        for obj in found[kind]:
            labels = obj.attrs.get("Labels") or {}
            if _doomed(labels, now, everything):
                try:
                    obj.remove()
                    getattr(report, kind).append(obj.name)
                except errors.NotFound:
                    pass
                except errors.APIError as exc:
                    log.warning("reaper: could not remove %s %s: %s", kind[:-1], obj.name, exc)
    if report.total:
        log.info("reaper removed %d object(s): %s", report.total, report)
    return report
