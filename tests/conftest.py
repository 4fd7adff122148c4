"""Shared fixtures: no traffic leaves the machine, Docker is found or skipped, and nothing leaks."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: object) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths (the Docker socket) are local
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: would need DNS and the outside world


def _guarded_connect(self: socket.socket, address: object) -> None:
    if not _is_local(address):
        raise ConnectionRefusedError(
            f"tests may only connect to 127.0.0.1 and servers they start; blocked {address!r} "
            "(a hosted LLM API or other outside address)"
        )
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    if not _is_local(address):
        raise ConnectionRefusedError(f"tests may only connect to 127.0.0.1; blocked {address!r}")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _no_outside_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection to an address outside this machine (hosted LLM APIs included)."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def docker_available() -> bool:
    """True when a Docker daemon answers on this machine."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


#: Seconds the first Docker test may take: it builds the base images (minutes on a new machine).
FIRST_DOCKER_TEST_TIMEOUT = 1200


@pytest.hookimpl(trylast=True)  # after any plugin that reorders the items (pytest-randomly)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    docker_items = [item for item in items if item.get_closest_marker("docker")]
    if not docker_items:
        return
    if docker_available():
        # Whichever Docker test runs first builds the base images (`base_images`, requested by
        # every Docker test): give that one room beyond the suite's per-test timeout.
        docker_items[0].add_marker(pytest.mark.timeout(FIRST_DOCKER_TEST_TIMEOUT))
        return
    if os.environ.get("SKYRL_REQUIRE_DOCKER") == "1":
        raise pytest.UsageError(
            "SKYRL_REQUIRE_DOCKER=1 but no Docker daemon answers (scripts/start-docker.sh)"
        )
    skip = pytest.mark.skip(reason="no Docker daemon (start one with scripts/start-docker.sh)")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def base_images() -> dict[str, str]:
    """The offline base images (``skyrl-sandbox/minimal`` and ``skyrl-sandbox/python``, with their
    public aliases), built at most once per run by the same function as ``skyrl sandbox
    build-images`` and skipped when their content-hash tags exist. Recipe name -> tag."""
    from skyrl_gym.sandbox.images import build_images

    built = build_images(["minimal", "python"], log=lambda line: print(f"[images] {line}"))
    return {b.recipe: b.tag for b in built}


@pytest.fixture(autouse=True)
def _docker_tests_have_base_images(request: pytest.FixtureRequest) -> None:
    """Every test marked ``docker`` (executed docs blocks included) finds the base images, whatever
    the order of the tests and whatever this machine already holds. Autouse fixtures are set up
    before a test's own fixtures, so a pool or an env a test builds already sees them."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("base_images")
