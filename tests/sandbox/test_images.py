"""Offline base images: content-hash caching, Debian aliases, FROM debian:bookworm offline."""

import argparse
import io

import pytest

from skyrl_gym.errors import ConfigError
from skyrl_gym.sandbox.images import RECIPES, ImageRecipe, build_images, image_tag


def test_content_hash_follows_the_recipe():
    base = ImageRecipe("x/y")
    assert base.content_hash("http://m/debian") == base.content_hash("http://m/debian/")
    assert base.content_hash("http://m/debian") != ImageRecipe("x/y", packages=("git",)).content_hash(
        "http://m/debian"
    )
    assert base.content_hash("http://m/debian") != base.content_hash("http://other/debian")
    assert image_tag("minimal", "http://m/debian").startswith("skyrl-sandbox/minimal:")


def test_unknown_recipe_is_a_config_error():
    with pytest.raises(ConfigError, match="minimal"):
        build_images(["minimall"])


@pytest.mark.docker
def test_second_build_is_skipped_and_aliases_point_at_the_image(sandbox_images, capsys):
    import docker

    built = build_images(["minimal", "python"], log=print)
    assert [b.built for b in built] == [False, False]
    client = docker.from_env()
    try:
        minimal = client.images.get(sandbox_images["minimal"])
        for alias in RECIPES["minimal"].aliases + ("skyrl-sandbox/minimal:latest",):
            assert client.images.get(alias).id == minimal.id
        assert minimal.labels["skyrl.image.recipe"] == "minimal"
    finally:
        client.close()
    # the CLI verb calls the same function
    from skyrl_gym.sandbox.cli import add_command

    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sandbox", "build-images", "minimal"])
    assert args.handler(args) == 0
    assert "up to date" in capsys.readouterr().out


@pytest.mark.docker
def test_a_dockerfile_from_debian_bookworm_builds_offline(sandbox_images):
    import docker

    client = docker.from_env()
    tag = "skyrl-test-from-bookworm:tmp"
    dockerfile = b'FROM debian:bookworm\nRUN echo built > /built.txt\nCMD ["cat", "/built.txt"]\n'
    try:
        client.images.build(
            fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, forcerm=True, network_mode="none"
        )
        out = client.containers.run(tag, remove=True, network_mode="none")
        assert out == b"built\n"
    finally:
        try:
            client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
        client.close()


@pytest.mark.docker
def test_python_image_has_the_common_tools(sandbox_images):
    from skyrl_gym.sandbox import DockerSandbox, DockerSandboxConfig, SandboxLimits

    with DockerSandbox(
        DockerSandboxConfig(image=sandbox_images["python"], limits=SandboxLimits(timeout_s=20))
    ) as sb:
        r = sb.exec(
            "python3 --version && git --version && curl --version | head -1 && ps --version && patch --version | head -1"
        )
        assert r.ok, r
        assert "Python 3.11" in r.stdout and "git version" in r.stdout
