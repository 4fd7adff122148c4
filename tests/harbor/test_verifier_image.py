"""A separate verifier's image built from ``tests/Dockerfile`` (Harbor's verifier environment):
the tests run in it, not in the agent's image."""

from __future__ import annotations

import pytest

from harbor_adapter import load_task
from tests.harbor.conftest import TOML

pytestmark = pytest.mark.docker

CHECK = """\
ok=0
[ -f /verifier-tools/marker ] && [ "$(cat /app/out.txt)" = done ] && ok=1
echo $ok > /logs/verifier/reward.txt
"""


@pytest.mark.parametrize(("mode", "reward"), [("separate", 1.0), ("shared", 0.0)])
def test_the_verifier_runs_in_the_image_of_tests_dockerfile(base_images, make_task, mode, reward):
    from harbor_adapter.trial import Trial

    toml = TOML.replace(
        "[verifier]\ntimeout_sec = 30.0\n", f'[verifier]\ntimeout_sec = 30.0\nenvironment_mode = "{mode}"\n'
    )
    toml += '\n[[artifacts]]\nsource = "/app/out.txt"\n'
    root = make_task(
        toml=toml,
        test_sh=CHECK,
        files={
            "tests/Dockerfile": "FROM skyrl-sandbox/minimal:latest\nRUN mkdir /verifier-tools && echo v > /verifier-tools/marker\n"
        },
    )
    task = load_task(root)
    with Trial(task) as trial:
        assert trial.run("mkdir -p /app && echo done > /app/out.txt && test ! -e /verifier-tools").ok
        result = trial.verify()
    # separate: the verifier's own image has the marker; shared: the agent's container has not
    assert result.reward == reward, result
