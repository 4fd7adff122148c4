"""Repositories on the host: find an instance's repository, and snapshot it at ``base_commit``.

A snapshot is a tar of the files at ``base_commit`` plus a fresh git repository with exactly
one commit (so ``git diff`` shows the agent's changes and no history after ``base_commit`` is
there to read). Snapshots and clones of ``.bundle`` files are cached under :func:`cache_dir`.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from skyrl_gym.envs.swe.types import SWEInstance
from skyrl_gym.errors import ConfigError, SandboxError

__all__ = ["cache_dir", "resolve_repo", "RepoSource", "git"]

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "skyrl",
    "GIT_AUTHOR_EMAIL": "skyrl@localhost",
    "GIT_COMMITTER_NAME": "skyrl",
    "GIT_COMMITTER_EMAIL": "skyrl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
#: Ignored in every snapshot, so byte-code and caches never show up in the agent's diff.
EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n*.egg-info/\n"


def cache_dir() -> Path:
    """Where clones and snapshots are kept: ``$SKYRL_SWE_CACHE`` or ``/var/tmp/skyrl-swe``.

    World-readable on purpose: local sandboxes run as unprivileged users and read from it."""
    path = Path(os.environ.get("SKYRL_SWE_CACHE", "/var/tmp/skyrl-swe"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def git(*args: str, cwd: str | os.PathLike[str] | None = None, input: bytes | None = None) -> bytes:
    """Run git on the host with a fixed identity; raise :class:`SandboxError` on failure."""
    env = {**os.environ, **_GIT_ENV, "HOME": str(cache_dir())}
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip()
        raise SandboxError(f"git {' '.join(args[:3])} failed in {cwd}: {msg}")
    return proc.stdout


def _stems(repo: str) -> list[str]:
    """Names a repository may have in a repos folder: ``owner__name``; for a SWE-smith mirror
    ``swesmith/owner__name.commit`` also ``owner__name.commit``, ``owner__name`` and ``name``."""
    stems = [repo.replace("/", "__")]
    if repo.startswith("swesmith/") and "." in repo:
        mirror = repo.split("/", 1)[1]
        original = mirror.rsplit(".", 1)[0]
        stems += [mirror, original, original.split("__", 1)[-1]]
    return list(dict.fromkeys(stems))


def resolve_repo(instance: SWEInstance, repos_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory or bundle holding ``instance``'s repository.

    ``repo_path`` wins; else ``repo`` (``owner/name``) is looked up in ``repos_dir`` as
    ``owner__name`` or ``owner__name.bundle`` (a SWE-smith mirror also under the names of
    :func:`_stems`: the original repository serves, since the row's bug is applied to it)."""
    if instance.repo_path:
        path = Path(instance.repo_path)
        if not path.exists():
            raise ConfigError(f"instance {instance.instance_id!r}: repo_path {str(path)!r} does not exist")
        return path
    if repos_dir is None:
        raise ConfigError(
            f"instance {instance.instance_id!r} has no repo_path; pass --repos DIR (or env_config "
            f"repos_dir) holding {instance.repo.replace('/', '__')!r} as a directory or .bundle"
        )
    stem = instance.repo.replace("/", "__")
    for name in _stems(instance.repo):
        for candidate in (Path(repos_dir) / name, Path(repos_dir) / f"{name}.bundle"):
            if candidate.exists():
                return candidate
    raise ConfigError(
        f"instance {instance.instance_id!r}: no {stem!r} or {stem}.bundle in {str(repos_dir)!r}; "
        "clone the repository there (git clone --mirror) or pass its path as repo_path"
    )


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class RepoSource:
    """One repository on the host (a working copy, a bare repository or a ``.bundle``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = Path(path).resolve()
        if path.is_file():
            stat = path.stat()
            key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
            clone = cache_dir() / "clones" / f"{path.stem}-{key}.git"
            if not clone.exists():
                clone.parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(dir=clone.parent, prefix=".clone-"))
                git("clone", "-q", "--mirror", str(path), str(tmp / "repo.git"))
                try:
                    os.replace(tmp / "repo.git", clone)
                except OSError:  # another process won the race
                    pass
                subprocess.run(["rm", "-rf", str(tmp)], check=False)
            self.git_dir = clone
        elif path.is_dir():
            self.git_dir = path
        else:
            raise ConfigError(f"repository {str(path)!r} is neither a directory nor a bundle file")
        self.path = path

    def commit(self, ref: str) -> str:
        """The full hash of ``ref``."""
        try:
            return git("rev-parse", "--verify", f"{ref}^{{commit}}", cwd=self.git_dir).decode().strip()
        except SandboxError as exc:
            raise ConfigError(f"commit {ref!r} is not in {str(self.path)!r}: {exc}") from None

    def files(self, ref: str) -> list[str]:
        """Paths of the files at ``ref``."""
        out = git("ls-tree", "-r", "--name-only", "-z", self.commit(ref), cwd=self.git_dir)
        return [p for p in out.decode().split("\0") if p]

    def packages(self, ref: str) -> set[str]:
        """Directories holding an ``__init__.py`` at ``ref``."""
        return {str(Path(p).parent) for p in self.files(ref) if Path(p).name == "__init__.py"}

    def added_files_diff(self, ref: str, paths: Sequence[str]) -> str:
        """A diff that creates ``paths`` as they are at ``ref`` (from the empty tree)."""
        empty = git("hash-object", "-t", "tree", "/dev/null", cwd=self.git_dir).decode().strip()
        diff = git(
            "diff", "--binary", "--full-index", empty, self.commit(ref), "--", *paths, cwd=self.git_dir
        )
        return diff.decode()

    def _bug_does_not_apply(self, work: str, commit: str, bug: str, exc: Exception) -> ConfigError:
        """The error for a bug patch that does not apply at ``commit``; it says so when the tree
        already has the bug (the patch applies in reverse): a SWE-smith row from before July
        2025, whose ``base_commit`` is the mirror's buggy commit, not a clean one."""
        try:
            git("apply", "--check", "--reverse", "--whitespace=nowarn", "-", cwd=work, input=bug.encode())
        except SandboxError:
            return ConfigError(f"the bug patch does not apply at {commit[:12]} of {self.path}: {exc}")
        return ConfigError(
            f"{commit[:12]} of {self.path} already has the row's bug (its patch applies in reverse): "
            "the row's base_commit is a buggy commit, as in SWE-smith rows written before July 2025, "
            "whose base_commit is the mirror's 'Bug Patch' commit. Drop base_commit from the row, so "
            "the clean commit named by its repo ('swesmith/<owner>__<name>.<commit>') is the base, "
            "or set base_commit to that commit's parent"
        )

    def snapshot(self, ref: str, *, apply: str = "", remove: Sequence[str] = ()) -> Path:
        """A tar file of the tree at ``ref`` with a one-commit git repository (cached).

        ``apply``: a patch applied to the tree first (a SWE-smith row's bug); ``remove``: paths
        left out of it (that row's hidden test files)."""
        commit = self.commit(ref)
        recipe = EXCLUDES if not (apply or remove) else "\0".join([EXCLUDES, apply, *remove])
        out = cache_dir() / "snapshots" / f"{commit}-{hashlib.sha256(recipe.encode()).hexdigest()[:8]}.tar"
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="skyrl-swe-snap-") as work:
            archive = git("archive", "--format=tar", commit, cwd=self.git_dir)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(work, filter="data")
            git("init", "-q", "-b", "main", cwd=work)
            Path(work, ".git", "info").mkdir(exist_ok=True)
            Path(work, ".git", "info", "exclude").write_text(EXCLUDES)
            if apply:
                try:
                    git("apply", "--whitespace=nowarn", "-", cwd=work, input=apply.encode())
                except SandboxError as exc:
                    raise self._bug_does_not_apply(work, commit, apply, exc) from None
            for path in remove:
                Path(work, path).unlink(missing_ok=True)
            git("add", "-A", cwd=work)
            git("commit", "-q", "--allow-empty", "-m", f"base {commit[:12]}", cwd=work)
            bio = io.BytesIO()
            with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for child in sorted(Path(work).iterdir()):
                    tar.add(child, arcname=child.name)
            _atomic_write(out, bio.getvalue())
        return out
