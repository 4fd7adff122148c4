import pickle

import pytest

from skyrl_gym import errors


@pytest.mark.parametrize(
    "exc",
    [
        errors.SkyRLError("x"),
        errors.ConfigError("bad value"),
        errors.RegistrationError("dup"),
        errors.EnvNotFoundError("no env"),
        errors.MissingDependencyError("torch", "training", "training"),
        errors.ToolDefinitionError("bad tool"),
        errors.ToolNotFoundError("no tool"),
        errors.EnvContractError("broken"),
        errors.SandboxError("boom"),
        errors.SandboxTimeoutError("slow"),
        errors.InfrastructureError("down"),
    ],
)
def test_errors_pickle_and_share_the_root(exc):
    clone = pickle.loads(pickle.dumps(exc))
    assert type(clone) is type(exc)
    assert str(clone) == str(exc)
    assert isinstance(clone, errors.SkyRLError)


def test_errors_inherit_the_matching_builtin():
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.EnvNotFoundError, KeyError)
    assert issubclass(errors.MissingDependencyError, ImportError)
    assert issubclass(errors.SandboxTimeoutError, TimeoutError)
    assert issubclass(errors.ToolDefinitionError, TypeError)


def test_missing_dependency_names_the_extra():
    msg = str(errors.MissingDependencyError("docker", "docker", "Docker sandboxes"))
    assert "pip install 'skyrl-stack[docker]'" in msg
    assert "Docker sandboxes" in msg
    with pytest.raises(errors.MissingDependencyError, match=r"\[training\]"):
        errors.require("surely_not_an_installed_module_xyz", "training")


def test_did_you_mean():
    assert errors.did_you_mean("text2slq", ["text2sql", "gsm8k"]) == " Did you mean 'text2sql'?"
    assert errors.did_you_mean("zzzzzz", ["text2sql"]) == ""


def test_infrastructure_errors_share_one_marker():
    from harbor_adapter.errors import ImageBuildError, RewardError, TrialError, TrialTimeoutError
    from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError
    from skyrl_gym.envs.judge import JudgeError, LLMCallError, SimulatedUserError
    from skyrl_gym.envs.search import RetrievalError
    from skyrl_gym.sandbox import SandboxFileNotFoundError, SandboxPathError

    infra = [
        errors.SandboxError,
        errors.SandboxTimeoutError,
        SandboxPathError,
        RetrievalError,
        LLMCallError,
        JudgeError,
        SimulatedUserError,
        TrialError,
        ImageBuildError,
        TrialTimeoutError,
        RewardError,
        PolicyError,
        PolicyHTTPError,
    ]
    for cls in infra:
        assert issubclass(cls, errors.InfrastructureError) and issubclass(cls, RuntimeError), cls
    assert issubclass(SandboxFileNotFoundError, FileNotFoundError)
    for cls in (errors.ConfigError, errors.ToolDefinitionError, errors.MissingDependencyError):
        assert not issubclass(cls, errors.InfrastructureError), cls
