import json
import subprocess
import sys

from skyrl_gym.cli import main


def test_skyrl_envs_lists_registered_envs(capsys):
    import skyrl_gym

    skyrl_gym.register("cli-guess", "tests.envs_for_tests:GuessEnv")
    try:
        assert main(["envs"]) == 0
        out = capsys.readouterr().out
        line = next(ln for ln in out.splitlines() if ln.startswith("cli-guess"))
        assert "Guess a number" in line
        assert main(["envs", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert {"id": "cli-guess", "entry_point": "tests.envs_for_tests:GuessEnv"}.items() <= next(
            r for r in rows if r["id"] == "cli-guess"
        ).items()
    finally:
        skyrl_gym.deregister("cli-guess")


def test_skyrl_command_installed():
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl_gym", "envs", "--json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), list)


def test_no_verb_prints_help(capsys):
    assert main([]) == 2
    assert "envs" in capsys.readouterr().out
