"""``[environment.healthcheck]`` and ``[steps.healthcheck]``: a command that must pass in the
agent's container before the agent starts (Docker HEALTHCHECK's rules: a start period whose
failures do not count, then ``retries`` consecutive failures fail it). A failure is the task's:
a ``TrialError`` (the episode is masked), and nothing is left running."""

from __future__ import annotations

import pytest

from harbor_adapter import load_task
from harbor_adapter.errors import TaskConfigError, TrialError
from tests.harbor.conftest import TOML


def with_check(table: str, body: str) -> str:
    return TOML + f"\n[{table}]\n" + body


def test_healthchecks_are_read_and_checked(make_task):
    root = make_task(
        toml=with_check("environment.healthcheck", 'command = "true"\nretries = 0\ninterval_sec = 0.5\n')
    )
    check = load_task(root).config.environment.healthcheck
    assert check is not None and (check.command, check.retries, check.interval_sec) == ("true", 0, 0.5)
    assert check.start_period_sec == 0.0 and check.timeout_sec == 30.0  # Harbor's defaults
    assert "environment.healthcheck" not in load_task(root).config.ignored
    bad = make_task("b", toml=with_check("environment.healthcheck", 'command = "true"\nretry = 2\n'))
    with pytest.raises(TaskConfigError, match="unknown key.*'retry'.*Did you mean 'retries'"):
        load_task(bad)
    neg = make_task("n", toml=with_check("environment.healthcheck", 'command = "true"\nretries = -1\n'))
    with pytest.raises(TaskConfigError, match="retries must be a whole number"):
        load_task(neg)


def steps_task(make_task, setup: str | None):
    toml = (
        TOML
        + '\n[[steps]]\nname = "one"\n\n[steps.healthcheck]\ncommand = "test -f /tmp/ready"\nretries = 1\ninterval_sec = 0.1\n'
    )
    files = {"steps/one/instruction.md": "Step one.\n"}
    if setup is not None:
        files["steps/one/workdir/setup.sh"] = setup
    return make_task(toml=toml, files=files)


def test_a_step_healthcheck_is_read(make_task):
    (step,) = load_task(steps_task(make_task, None)).steps
    assert step.config.healthcheck is not None and step.config.healthcheck.command == "test -f /tmp/ready"


@pytest.mark.docker
def test_the_environment_check_retries_until_it_passes(base_images, make_task):
    from harbor_adapter.trial import Trial

    # fails on the first attempt (and counts attempts), passes on the second
    command = "echo x >> /tmp/attempts; [ $(wc -l < /tmp/attempts) -ge 2 ]"
    check = f'command = "{command}"\nretries = 2\ninterval_sec = 0.1\n'
    with Trial(load_task(make_task(toml=with_check("environment.healthcheck", check)))) as trial:
        assert trial.run("wc -l < /tmp/attempts").stdout.strip() == "2"


@pytest.mark.docker
def test_a_failing_environment_check_fails_the_start_and_leaves_nothing(base_images, make_task):
    from harbor_adapter.trial import Trial

    check = 'command = "echo not ready; exit 3"\nretries = 1\ninterval_sec = 0.1\n'
    trial = Trial(load_task(make_task(toml=with_check("environment.healthcheck", check))))
    with pytest.raises(
        TrialError, match="healthcheck 'echo not ready; exit 3' failed 2 times in a row.*exited 3.*not ready"
    ):
        trial.start()
    assert trial.sandbox is None  # removed (the autouse fixture checks no container is left)


@pytest.mark.docker
@pytest.mark.parametrize("ready", [True, False])
def test_a_step_check_runs_after_its_setup(base_images, make_task, ready):
    from harbor_adapter.trial import Trial

    task = load_task(steps_task(make_task, "touch /tmp/ready\n" if ready else "true\n"))
    with Trial(task) as trial:
        if ready:
            trial.begin_step(task.steps[0])
            assert trial.step is task.steps[0]
        else:
            with pytest.raises(
                TrialError, match="step 'one''s healthcheck 'test -f /tmp/ready' failed 2 times"
            ):
                trial.begin_step(task.steps[0])
