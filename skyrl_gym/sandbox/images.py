"""Base images built offline: ``debootstrap`` from the Debian mirror into ``docker import``.

No image registry is reachable from these machines, so the project builds its own images:

- ``skyrl-sandbox/minimal``: Debian bookworm ``minbase``; also tagged with the public names it
  stands in for (``debian:bookworm``, ``debian:bookworm-slim``, ``debian:12``,
  ``debian:12-slim``), so a task Dockerfile that starts ``FROM debian:bookworm`` builds offline.
- ``skyrl-sandbox/python``: minimal plus python3, pip, venv, git and common tools; the default
  image of Docker sandboxes.

Each image is tagged with a content hash of its recipe (suite, variant, packages, mirror,
recipe version); building is skipped when that tag exists. A public alias is only set when no
image of that name exists or the existing one was built here (a pulled image is never
overwritten). ``skyrl sandbox build-images`` runs :func:`build_images`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox.dockerlib import docker_client, find_image

__all__ = ["ImageRecipe", "RECIPES", "BuiltImage", "build_images", "image_tag", "default_mirror"]

RECIPE_VERSION = "1"
LABEL_HASH = "skyrl.image.hash"
LABEL_RECIPE = "skyrl.image.recipe"
_LOCK_PATH = os.path.join(tempfile.gettempdir(), "skyrl-build-images.lock")


@dataclass(frozen=True)
class ImageRecipe:
    """How to build one base image with debootstrap."""

    name: str
    """Repository name, e.g. ``skyrl-sandbox/minimal``; tagged ``:<hash>`` and ``:latest``."""
    suite: str = "bookworm"
    """Debian suite."""
    variant: str = "minbase"
    """debootstrap variant (``minbase``: essential packages and apt only)."""
    packages: tuple[str, ...] = ()
    """Extra packages (``debootstrap --include``)."""
    aliases: tuple[str, ...] = ()
    """Public names this image stands in for (set only when not already taken by another image)."""

    def content_hash(self, mirror: str) -> str:
        """A hash of everything that decides the image's content."""
        recipe = {
            "v": RECIPE_VERSION,
            "suite": self.suite,
            "variant": self.variant,
            "packages": sorted(self.packages),
            "mirror": mirror.rstrip("/"),
        }
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


RECIPES: dict[str, ImageRecipe] = {
    "minimal": ImageRecipe(
        "skyrl-sandbox/minimal",
        aliases=("debian:bookworm", "debian:bookworm-slim", "debian:12", "debian:12-slim"),
    ),
    "python": ImageRecipe(
        "skyrl-sandbox/python",
        packages=(
            "python3",
            "python3-pip",
            "python3-venv",
            "git",
            "ca-certificates",
            "curl",
            "procps",
            "patch",
            "unzip",
            "xz-utils",
            "less",
            "tmux",
        ),
    ),
}


@dataclass(frozen=True)
class BuiltImage:
    """One image :func:`build_images` made sure exists."""

    recipe: str
    """Recipe key (``minimal``, ``python``)."""
    tag: str
    """The content-hash tag."""
    built: bool
    """False when the image existed already and building was skipped."""
    seconds: float
    """Time taken."""
    aliases: tuple[str, ...]
    """Names that now point at the image."""


def default_mirror() -> str:
    """The Debian mirror: ``$SKYRL_DEBIAN_MIRROR`` or ``http://deb.debian.org/debian``."""
    return os.environ.get("SKYRL_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def image_tag(recipe: str | ImageRecipe, mirror: str | None = None) -> str:
    """The content-hash tag of a recipe, e.g. ``skyrl-sandbox/python:3f2a...``."""
    r = RECIPES[recipe] if isinstance(recipe, str) else recipe
    return f"{r.name}:{r.content_hash(mirror or default_mirror())[:16]}"


def _tag_aliases(
    client: object, image: object, recipe: ImageRecipe, log: Callable[[str], None]
) -> tuple[str, ...]:
    done = [f"{recipe.name}:latest"]
    image.tag(recipe.name, "latest")  # type: ignore[attr-defined]
    for alias in recipe.aliases:
        current = find_image(client, alias)
        labels = (current.labels if current is not None else None) or {}  # type: ignore[attr-defined]
        if current is not None and LABEL_RECIPE not in labels:
            log(f"  keeping {alias}: an image of that name exists and was not built here")
            continue
        repo, _, tag = alias.partition(":")
        image.tag(repo, tag or "latest")  # type: ignore[attr-defined]
        done.append(alias)
    return tuple(done)


def _debootstrap(recipe: ImageRecipe, mirror: str, rootfs: str, log: Callable[[str], None]) -> None:
    cmd = ["debootstrap", f"--variant={recipe.variant}"]
    if recipe.packages:
        cmd.append("--include=" + ",".join(recipe.packages))
    cmd += [recipe.suite, rootfs, mirror]
    log(f"  {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SandboxError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "var/log"):
        path = os.path.join(rootfs, junk)
        for entry in os.listdir(path) if os.path.isdir(path) else ():
            full = os.path.join(path, entry)
            if os.path.isfile(full) and not entry.startswith("lock"):
                os.unlink(full)
    for leftover in ("etc/hostname", "etc/resolv.conf"):
        p = os.path.join(rootfs, leftover)
        if os.path.lexists(p):
            os.unlink(p)


def _build_one(
    client: object, key: str, recipe: ImageRecipe, mirror: str, work: str, log: Callable[[str], None]
) -> None:
    digest = recipe.content_hash(mirror)
    rootfs = os.path.join(work, key)
    _debootstrap(recipe, mirror, rootfs, log)
    tarball = os.path.join(work, f"{key}.tar")
    subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", tarball, "."], check=True, timeout=600)
    shutil.rmtree(rootfs, ignore_errors=True)
    changes = [
        'CMD ["/bin/bash"]',
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"LABEL {LABEL_HASH}={digest} {LABEL_RECIPE}={key}",
    ]
    repo, _, tag = image_tag(recipe, mirror).partition(":")
    log(f"  docker import -> {repo}:{tag}")
    client.api.import_image_from_file(tarball, repository=repo, tag=tag, changes=changes)  # type: ignore[attr-defined]
    os.unlink(tarball)


def build_images(
    names: Sequence[str] | None = None,
    *,
    mirror: str | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> list[BuiltImage]:
    """Make sure the base images exist, building the missing ones (about 30-40 s each).

    ``names``: recipe keys (default: all of :data:`RECIPES`). Needs root, ``debootstrap`` and a
    Docker daemon; concurrent calls on one machine wait for each other (a file lock).
    """
    keys = list(names) if names else list(RECIPES)
    unknown = [k for k in keys if k not in RECIPES]
    if unknown:
        raise ConfigError(f"unknown image recipe(s) {unknown}; known: {sorted(RECIPES)}")
    mirror = mirror or default_mirror()
    client = docker_client()
    results = []
    with open(_LOCK_PATH, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per machine
        for key in keys:
            recipe = RECIPES[key]
            tag = image_tag(recipe, mirror)
            start = time.monotonic()
            image = None if force else find_image(client, tag)
            built = image is None
            if built:
                if shutil.which("debootstrap") is None:
                    raise SandboxError("building base images needs debootstrap: apt-get install debootstrap")
                if os.geteuid() != 0:
                    raise SandboxError("building base images needs root (debootstrap creates device nodes)")
                log(f"building {key} ({tag})")
                work = tempfile.mkdtemp(prefix="skyrl-image-", dir="/var/tmp")
                try:
                    _build_one(client, key, recipe, mirror, work, log)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                image = client.images.get(tag)
            aliases = _tag_aliases(client, image, recipe, log)
            took = time.monotonic() - start
            log(
                f"{key}: {tag} {'built' if built else 'up to date'} in {took:.1f} s; also {', '.join(aliases)}"
            )
            results.append(BuiltImage(key, tag, built, took, aliases))
    return results
