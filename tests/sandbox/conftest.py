"""Sandbox test fixtures: the base images by recipe name and the no-leak check."""

from __future__ import annotations

import os

import pytest

from tests.conftest import docker_available


def _leaks(client, before: set[str]) -> list[str]:
    """Labelled objects made during this session by this process or by a process now dead."""
    from skyrl_gym.sandbox.reaper import list_labelled, owner_alive

    found = []
    objs = list_labelled(client)
    for kind, items in objs.items():
        for obj in items:
            oid = getattr(obj, "id", None) or obj.name
            labels = getattr(obj, "labels", None) or obj.attrs.get("Labels") or {}
            if oid in before:
                continue
            mine = labels.get("skyrl.owner.pid") == str(os.getpid())
            if mine or owner_alive(labels) is False:
                found.append(f"{kind[:-1]} {obj.name} (owner pid {labels.get('skyrl.owner.pid')})")
    return found


@pytest.fixture(scope="session", autouse=True)
def no_leaked_sandboxes():
    """After the whole test session, no labelled container, network or volume is left."""
    if not docker_available():
        yield
        return
    import docker

    client = docker.from_env()
    from skyrl_gym.sandbox.reaper import list_labelled

    before = {getattr(o, "id", None) or o.name for items in list_labelled(client).values() for o in items}
    yield
    leaks = _leaks(client, before)
    client.close()
    assert not leaks, f"sandbox objects leaked by the test session: {leaks}"


@pytest.fixture(scope="session")
def sandbox_images(base_images: dict[str, str]) -> dict[str, str]:
    """The base images by recipe name (built by the root conftest's ``base_images``)."""
    return base_images
