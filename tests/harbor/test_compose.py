"""Multi-container Harbor tasks (``environment/docker-compose.yaml``): the loader's checks (no
Docker), and the bundled ``stock-check`` task's services on a task-private network with real
Docker Compose: reachable by name, nothing else on the network, nothing left after the trial or
after ``kill -9`` of its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harbor_adapter import bundled_tasks_dir, load_task
from harbor_adapter.errors import HarborTaskError, TaskFileMissingError, UnsupportedTaskError

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "FROM skyrl-sandbox/python:latest\nWORKDIR /app\n"
SERVICE = 'FROM skyrl-sandbox/python:latest\nCMD ["python3", "-c", "import time; time.sleep(3600)"]\n'


def compose_task(
    make_task, compose: str, *, files: dict[str, str] | None = None, dockerfile: str | None = DOCKERFILE
):
    toml = "[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 30.0\n\n[environment]\nmemory_mb = 256\n"
    extra = {"environment/docker-compose.yaml": textwrap.dedent(compose), **(files or {})}
    return make_task(toml=toml, dockerfile=dockerfile, files=extra)


# -- the loader ------------------------------------------------------------------------------
def test_the_bundled_compose_task_loads_with_its_services():
    task = load_task(bundled_tasks_dir() / "stock-check")
    assert task.compose is not None
    (inventory,) = task.compose.services
    assert inventory.name == "inventory" and inventory.healthcheck
    assert inventory.build_context == task.environment_dir / "inventory"
    assert task.compose.main_environment == {"INVENTORY_URL": "http://inventory:8080"}


def test_ignored_keys_are_recorded(make_task):
    root = compose_task(
        make_task,
        """\
        services:
          db:
            image: skyrl-sandbox/minimal:latest
            ports: ["5432:5432"]
            restart: always
          main:
            volumes: ["./x:/x"]
        """,
    )
    ignored = load_task(root).config.ignored
    assert "docker-compose.yaml: services.db.ports" in ignored
    assert "docker-compose.yaml: services.db.restart" in ignored
    assert "docker-compose.yaml: services.main.volumes" in ignored


@pytest.mark.parametrize(
    ("service", "words"),
    [
        ("    privileged: true\n", ["privileged", "refused"]),
        ("    network_mode: host\n", ["network_mode", "task's own network"]),
        ("    cap_add: [NET_ADMIN]\n", ["cap_add"]),
        ("    volumes: ['/var/run/docker.sock:/var/run/docker.sock']\n", ["host path", "environment/"]),
        ("    volumes: ['data:/data']\n", ["'data'", "top-level volumes"]),
        ("    depends_on: [main]\n", ["main", "starts last"]),
        ("    depends_on: [dbx]\n", ["depends_on names no service", "dbx"]),
        ("    frobnicate: 1\n", ["'frobnicate'", "supported"]),
    ],
)
def test_unsafe_or_unknown_service_keys_are_refused_with_the_reason(make_task, service, words):
    root = compose_task(make_task, "services:\n  db:\n    image: skyrl-sandbox/minimal:latest\n" + service)
    with pytest.raises(HarborTaskError) as err:
        load_task(root)
    message = str(err.value)
    assert "docker-compose.yaml" in message and "'db'" in message
    for word in words:
        assert word in message, message


def test_a_build_context_outside_the_environment_is_refused(make_task):
    root = compose_task(make_task, "services:\n  db:\n    build: ../tests\n")
    with pytest.raises(UnsupportedTaskError, match="outside environment/"):
        load_task(root)


def test_a_service_needs_an_image_or_a_build_folder(make_task):
    root = compose_task(make_task, "services:\n  db:\n    command: ['true']\n")
    with pytest.raises(HarborTaskError, match="needs an image or a build folder"):
        load_task(root)


def test_compose_without_a_dockerfile_for_main_says_so(make_task):
    root = compose_task(
        make_task, "services:\n  db:\n    image: skyrl-sandbox/minimal:latest\n", dockerfile=None
    )
    with pytest.raises(TaskFileMissingError, match="no environment/Dockerfile.*(main)"):
        load_task(root)


# -- real Docker Compose ---------------------------------------------------------------------
def _labelled(client, **labels: str) -> dict[str, list[str]]:
    flt = {"label": [f"{k}={v}" for k, v in labels.items()]}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=flt, ignore_removed=True)],
        "networks": [n.name for n in client.networks.list(filters=flt)],
    }


@pytest.mark.docker
def test_services_share_a_private_network_with_main_and_nothing_is_left(base_images):
    import docker

    from harbor_adapter.trial import Trial

    task = load_task(bundled_tasks_dir() / "stock-check")
    client = docker.from_env()
    try:
        with Trial(task) as trial:
            assert trial.services is not None
            net = client.networks.get(trial.services.network)
            assert net.attrs["Internal"] is True  # no route off the machine: only the task's hosts
            attached = {c["Name"] for c in net.attrs["Containers"].values()}
            services = {c.name for c in trial.services.containers(client)}
            assert attached == services | {trial.sandbox.name} and len(services) == 1
            for name in services:
                labels = client.containers.get(name).labels
                assert (
                    labels["skyrl.owner.pid"] == str(os.getpid()) and labels["harbor.task"] == "stock-check"
                )
            seen = trial.run(
                "ls /sys/class/net; echo $INVENTORY_URL; "
                "python3 -c \"import urllib.request as u; print(u.urlopen('http://inventory:8080/items').read().decode())\""
            )
            assert seen.ok, seen.stderr
            assert seen.stdout.split()[:2] == ["eth0", "lo"] and "http://inventory:8080" in seen.stdout
            assert '"a17"' in seen.stdout
            network, project = trial.services.network, trial.services.project
        left = _labelled(client, **{"com.docker.compose.project": project})
        assert left == {"containers": [], "networks": []}
        with pytest.raises(docker.errors.NotFound):
            client.networks.get(network)
    finally:
        client.close()


@pytest.mark.docker
def test_a_service_that_dies_fails_the_trial_with_its_log_and_leaves_nothing(base_images, make_task):
    import docker

    from harbor_adapter.errors import TrialError
    from harbor_adapter.trial import Trial

    root = compose_task(
        make_task,
        """\
        services:
          db:
            build: ./db
        """,
        files={
            "environment/db/Dockerfile": 'FROM skyrl-sandbox/python:latest\nCMD ["sh", "-c", "echo no config; exit 3"]\n'
        },
    )
    with pytest.raises(TrialError) as err:
        with Trial(load_task(root)):
            pass
    assert "'db'" in str(err.value) and "code 3" in str(err.value) and "no config" in str(err.value)
    client = docker.from_env()
    try:
        assert _labelled(client, **{"skyrl.owner.pid": str(os.getpid()), "harbor.task": "t"}) == {
            "containers": [],
            "networks": [],
        }
    finally:
        client.close()


@pytest.mark.docker
def test_a_service_image_that_is_not_here_is_named(base_images, make_task):
    from harbor_adapter.errors import ImageBuildError
    from harbor_adapter.trial import Trial

    root = compose_task(make_task, "services:\n  db:\n    image: postgres:16\n")
    with pytest.raises(ImageBuildError, match="'db' needs image 'postgres:16'.*no registry"):
        with Trial(load_task(root)):
            pass


OWNER = """\
import sys, time
from harbor_adapter import bundled_tasks_dir, load_task
from harbor_adapter.trial import Trial
trial = Trial(load_task(bundled_tasks_dir() / "stock-check"))
trial.start()
print(trial.services.project, trial.services.network, flush=True)
time.sleep(600)
"""


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_kill_9_of_the_owner_then_the_reaper_removes_services_and_network(base_images):
    import docker

    from skyrl_gym.sandbox import reap

    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER], cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 2, "the owner did not start its trial"
        project, network = line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    client = docker.from_env()
    try:
        before = _labelled(client, **{"skyrl.owner.pid": str(proc.pid)})
        assert len(before["containers"]) == 2 and before["networks"] == [network]  # main + inventory
        report = reap(client)
        assert set(before["containers"]) <= set(report.containers) and network in report.networks
        deadline = time.monotonic() + 30
        while _labelled(client, **{"skyrl.owner.pid": str(proc.pid)}) != {"containers": [], "networks": []}:
            assert time.monotonic() < deadline, "leftovers after the reaper"
            time.sleep(0.5)
    finally:
        client.close()


COUNTER = """\
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

hits = 0


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        global hits
        if self.path == "/hit":
            hits += 1
        body = str(hits).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""
SNAPSHOT = """\
import os
import urllib.request

os.makedirs("/state", exist_ok=True)
with open("/state/count.txt", "w") as f:
    f.write(urllib.request.urlopen("http://127.0.0.1:8080/count").read().decode())
"""


def counter_task(make_task, mode: str):
    toml = f"""\
[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0
environment_mode = "{mode}"

[[verifier.collect]]
service = "counter"
command = "python3 /snapshot.py"

[[verifier.collect]]
command = "echo collected-in-main > /app/main-note.txt"

[environment]
memory_mb = 256

[[artifacts]]
source = "/state/count.txt"
service = "counter"

[[artifacts]]
source = "/app/main-note.txt"
"""
    test_sh = """\
        ok=0
        [ "$(cat /state/count.txt)" = 3 ] && [ "$(cat /app/main-note.txt)" = collected-in-main ] && ok=1
        echo $ok > /logs/verifier/reward.txt
        """
    return make_task(
        toml=toml,
        test_sh=test_sh,
        dockerfile=DOCKERFILE,
        files={
            "environment/docker-compose.yaml": "services:\n  counter:\n    build: ./counter\n",
            "environment/counter/Dockerfile": (
                'FROM skyrl-sandbox/python:latest\nCOPY server.py snapshot.py /\nCMD ["python3", "/server.py"]\n'
            ),
            "environment/counter/server.py": COUNTER,
            "environment/counter/snapshot.py": SNAPSHOT,
        },
    )


def test_artifacts_and_collect_hooks_name_services_of_the_task(make_task):
    root = counter_task(make_task, "separate")
    task = load_task(root)
    assert [(a.source, a.service) for a in task.config.artifacts] == [
        ("/state/count.txt", "counter"),
        ("/app/main-note.txt", "main"),
    ]
    assert [h.service for h in task.config.verifier.collect] == ["counter", "main"]
    (root / "environment" / "docker-compose.yaml").write_text("services:\n  other:\n    build: ./counter\n")
    with pytest.raises(HarborTaskError, match="names service 'counter'; the task's services: \\['other'\\]"):
        load_task(root)


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_collect_hooks_snapshot_a_service_for_the_verifier(base_images, make_task, mode):
    """The service keeps its state in memory; a collect hook writes it to a file, which the
    verifier reads as an artifact of that service (in a fresh container, or copied into main)."""
    from harbor_adapter.trial import Trial

    task = load_task(counter_task(make_task, mode))
    hit = (
        "python3 -c \"import urllib.request as u; [u.urlopen('http://counter:8080/hit') for _ in range(3)]\""
    )
    with Trial(task) as trial:
        assert trial.verifier_mode.value == mode
        assert trial.run(hit).ok
        done = trial.verify()
    assert done.reward == 1.0, done
    with Trial(task) as trial:  # did nothing: the snapshot says 0
        assert trial.verify().reward == 0.0
