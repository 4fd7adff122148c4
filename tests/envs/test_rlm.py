"""The ``rlm`` envs with real REPL worker processes (no mocks): state across turns, answers,
the model's mistakes as observations, timeouts, cleanup (also after ``kill -9``), subclass
hooks, LM callbacks, the registered id and one episode through the agent loop."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import skyrl_gym
from skyrl_gym.envs.rlm import BaseRLMEnv, RLMEnv, SandboxREPL
from skyrl_gym.envs.rlm._text import (
    DEFAULT_RLM_SYSTEM_PROMPT,
    NO_BLOCK_MESSAGE,
    find_code_block,
    find_final,
    find_final_var,
)
from skyrl_gym.envs.rlm.repl import LOST_STATE_NOTE
from skyrl_gym.errors import ConfigError
from skyrl_gym.sandbox import bwrap_usable

REPO = Path(__file__).resolve().parents[2]
ISOLATIONS = ["auto", pytest.param("none", marks=pytest.mark.skipif(os.geteuid() != 0, reason="needs root"))]
CONTEXT = "Shipping log.\nCrate 17 went to Lisbon.\nCrate 18 went to Oslo.\nThe password is heron-42.\n"
PROMPT = [{"role": "user", "content": "What is the password?"}]


def block(code: str) -> str:
    return f"Let me look.\n```repl\n{code}\n```\n"


def make(extras=None, env_config=None, **kw):
    row = {
        "extra_info": {"context_text": CONTEXT},
        "reward_spec": {"ground_truth": "heron-42"},
        **(extras or {}),
    }
    return skyrl_gym.make("rlm", env_config=env_config or {}, extras=row, **kw)


@pytest.fixture
def env():
    e = make()
    e.init(PROMPT)
    yield e
    e.close()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def tree(repl: SandboxREPL) -> list[int]:
    root = psutil.Process(repl.proc.pid)
    return [root.pid] + [c.pid for c in root.children(recursive=True)]


def wait_gone(pids, timeout=10.0) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def uid_processes(uid: int | None) -> list[int]:
    if uid is None:
        return []
    found = psutil.process_iter(["uids"])
    return [p.pid for p in found if p.info["uids"] and p.info["uids"].real == uid and alive(p.pid)]


# --------------------------------------------------------------------------- the episode
def test_init_messages_and_state_across_turns(env):
    messages, _ = env.init(PROMPT)  # a second init starts over with the same worker
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[0]["content"] == DEFAULT_RLM_SYSTEM_PROMPT.replace("{custom_tools_section}", "")
    assert messages[1]["content"] == (
        f"Your context is a str with {len(CONTEXT)} total characters, "
        f"and is broken up into chunks of char lengths: [{len(CONTEXT)}]."
    )
    assert messages[2]["content"].startswith("You have not interacted with the REPL environment")
    assert 'to answer the original prompt: "What is the password?"' in messages[2]["content"]

    out = env.step(block("x = 6 * 7"))
    assert not out.done and out.reward == 0.0 and out.metadata == {}
    assert out.observations[0]["content"] == (
        "Code executed:\n```python\nx = 6 * 7\n```\n\nREPL output:\n"
        "REPL variables: ['context_0', 'context', 'x']\n"
    )
    reminder = out.observations[1]["content"]  # the short reminder: the question is not repeated
    assert reminder.startswith("The history before is your previous interactions")
    assert "original prompt" not in reminder and reminder.endswith("Your next action:")
    out = env.step(block("def twice(n):\n    return 2 * n\nprint(twice(x))"))
    assert "\n84\n" in out.observations[0]["content"]
    out = env.step(block("import re\nprint(re.findall(r'heron-\\d+', context), twice(1))"))
    assert "['heron-42'] 2" in out.observations[0]["content"]  # imports work; functions persist


def test_full_turn_prompts_repeat_the_question():
    e = make(env_config={"turn_prompts": "full"})
    e.init(PROMPT)
    try:
        out = e.step(block("print(1)"))
        assert 'original prompt: "What is the password?"' in out.observations[1]["content"]
    finally:
        e.close()
    e = make(env_config={"turn_prompts": "none"})
    e.init(PROMPT)
    try:
        assert len(e.step(block("print(1)")).observations) == 1
    finally:
        e.close()


def test_final_answer_normalised_and_graded(env):
    out = env.step(block("print(len(context))") + "\nFINAL(  Heron-42 )")
    assert out.done and out.reward == 1.0 and out.observations == [] and out.truncated is False
    assert env.get_metrics() == {
        "turns_used": 1,
        "final_value_set": True,
        "final_answer": "Heron-42",
        "reward": 1.0,
        "repl_restarts": 0,
    }


def test_wrong_final_answer_scores_zero(env):
    out = env.step("FINAL(heron-41)")
    assert out.done and out.reward == 0.0 and env.get_metrics()["final_answer"] == "heron-41"


def test_final_var_in_a_cell_and_in_the_text(env):
    out = env.step(block("FINAL_VAR('nope')"))  # missing: a message, the episode goes on
    assert not out.done and "Error: Variable 'nope' not found" in out.observations[0]["content"]
    out = env.step(block("answer = context.split()[-1].rstrip('.')\nprint(SHOW_VARS())"))
    shown = "Available variables: {'context_0': 'str', 'context': 'str', 'answer': 'str'}"
    assert shown in out.observations[0]["content"]
    out = env.step("The variable is ready.\nFINAL_VAR(answer)")  # no block needed (published: one is)
    assert out.done and out.reward == 1.0 and env.get_metrics()["final_answer"] == "heron-42"

    e = make()
    e.init(PROMPT)
    try:
        out = e.step(block("FINAL_VAR(6 * 7)"))  # a value that is not a str is the answer itself
        assert out.done and out.reward == 0.0 and e.get_metrics()["final_answer"] == "42"
    finally:
        e.close()


def test_final_var_of_a_missing_variable_is_no_answer(env):
    out = env.step(block("print(1)") + "FINAL_VAR(nothere)\nFINAL(heron-42)")
    assert not out.done  # FINAL_VAR wins over FINAL and finds nothing, as published


def test_context_as_json_dict_and_from_the_prompt():
    ctx = {"a": "xyz", "b": [1, 2, 3]}
    e = make({"extra_info": {"context_text": json.dumps(ctx)}})
    try:
        messages, _ = e.init(PROMPT)
        assert messages[1]["content"] == (
            "Your context is a dict with 12 total characters, and is broken up into chunks of char lengths: [3, 9]."
        )
        out = e.step(block("print(type(context).__name__, context['b'][2])"))
        assert "\ndict 3\n" in out.observations[0]["content"]
    finally:
        e.close()
    e = make({"extra_info": {"context_text": "[1, 2]"}})  # JSON, but not an object: kept as text
    try:
        e.init(PROMPT)
        assert "\nstr\n" in e.step(block("print(type(context).__name__)")).observations[0]["content"]
    finally:
        e.close()
    e = skyrl_gym.make("rlm", extras={"reward_spec": {"ground_truth": "x"}})  # no context_text
    try:
        e.init([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q?"}])
        assert "\n'Be brief.\\nQ?'\n" in e.step(block("print(repr(context))")).observations[0]["content"]
    finally:
        e.close()


def test_no_block_observation(env):
    out = env.step("I will think first.")
    assert not out.done and out.metadata == {"error": "no_repl_block"}
    assert out.observations[0] == {"role": "user", "content": NO_BLOCK_MESSAGE}
    assert (
        NO_BLOCK_MESSAGE == "[No ```repl``` code block found. Wrap your code in ```repl\\n...\\n``` blocks.]"
    )
    assert out.observations[1]["content"].endswith("Your next action:")


def test_exception_and_syntax_error_are_observations(env):
    env.step(block("x = 1"))
    out = env.step(block("print(undefined_name)"))
    text = out.observations[0]["content"]
    assert out.metadata == {"error": "exception"} and not out.done
    assert 'File "<repl-' in text and "print(undefined_name)" in text  # the model's line is shown
    assert "NameError: name 'undefined_name' is not defined" in text and "_worker" not in text
    out = env.step(block("def f(:"))
    assert "SyntaxError" in out.observations[0]["content"] and out.metadata == {"error": "exception"}
    out = env.step(block("import sys\nprint('to err', file=sys.stderr)\nraise SystemExit(3)"))
    assert "to err" in out.observations[0]["content"] and "SystemExit: 3" in out.observations[0]["content"]
    assert "\n1\n" in env.step(block("print(x)")).observations[0]["content"]  # nothing was lost


def test_output_flood_is_cut(env):
    out = env.step(
        block("print('ab' * 500_000)\nimport subprocess\nsubprocess.run(['echo', 'from a child'])")
    )
    text = out.observations[0]["content"].split("REPL output:\n", 1)[1]
    m = re.search(r"\.\.\. \+ \[(\d+) chars\.\.\.\]$", text)
    assert m and len(text) == 20_000 + len(m.group(0)) and int(m.group(1)) > 980_000
    out = env.step(block("import subprocess\nsubprocess.run(['echo', 'from a child'])"))
    assert "\nfrom a child\n" in out.observations[0]["content"]  # output of child processes too


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_timeout_kills_and_restarts_the_repl(isolation):
    e = make({"repl_timeout": 1}, env_config={"isolation": isolation})
    e.init(PROMPT)
    try:
        e.step(block("x = 5"))
        old = tree(e.repl)
        t0 = time.monotonic()
        out = e.step(block("import subprocess\nsubprocess.Popen(['sleep', '300'])\nwhile True: pass"))
        assert time.monotonic() - t0 < 10
        text = out.observations[0]["content"]
        assert "Timeout after 1 seconds\n" + LOST_STATE_NOTE in text and not out.done
        assert out.metadata == {"error": "timeout", "repl_restarted": True}
        assert "REPL variables: ['context_0', 'context']" in text
        assert wait_gone(old) == []  # the old worker and the child it started are gone
        out = e.step(block("print(x)"))
        assert "NameError" in out.observations[0]["content"]
        assert "\n" + CONTEXT[:13] in e.step(block("print(context[:13])")).observations[0]["content"]
        assert e.get_metrics()["repl_restarts"] == 1
    finally:
        e.close()


def test_a_crash_of_the_repl_is_an_observation(env):
    env.step(block("x = 1"))
    out = env.step(block("import os\nos._exit(3)"))
    assert "The REPL process ended while running this code (exit status 3)" in out.observations[0]["content"]
    assert out.metadata["error"] == "crashed" and not out.done
    os.kill(env.repl.proc.pid, signal.SIGKILL)  # dies between turns
    env.repl.proc.wait(timeout=10)
    out = env.step(block("print('still here')"))
    text = out.observations[0]["content"]
    assert "The REPL process had ended since the last cell" in text and "\nstill here\n" in text


def test_forged_protocol_frames_only_replace_the_worker(env):
    code = (
        "import os\nfor fd in range(3, 64):\n    try:\n"
        "        os.write(fd, (5).to_bytes(8, 'big') + b'hello')\n    except OSError:\n        pass\n"
        "import time\ntime.sleep(0.5)"
    )
    out = env.step(block(code))
    assert out.metadata["error"] == "protocol" and "malformed answer" in out.observations[0]["content"]
    assert "\n2\n" in env.step(block("print(1 + 1)")).observations[0]["content"]


def test_turn_limit_scores_zero():
    e = make({"max_turns": 2})
    e.init(PROMPT)
    try:
        assert not e.step(block("print(1)")).done
        out = e.step(block("print(2)"))
        assert out.done and out.reward == 0.0 and out.observations == [] and out.truncated is True
        assert e.get_metrics()["final_value_set"] is False and e.get_metrics()["reward"] == 0.0
    finally:
        e.close()
    e = make({"max_turns": 1})
    e.init(PROMPT)
    try:
        out = e.step("no block")
        assert out.done and out.reward == 0.0 and out.observations[0]["content"] == NO_BLOCK_MESSAGE
    finally:
        e.close()


# --------------------------------------------------------------------------- processes
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_close_leaves_no_process(isolation):
    e = make(env_config={"isolation": isolation})
    e.init(PROMPT)
    e.step(block("import subprocess\np = subprocess.Popen(['sleep', '300'])"))
    pids, uid, workdir = tree(e.repl), e.repl.sandbox.uid, e.repl.sandbox.workdir
    assert len(pids) >= 3  # guard, REPL, sleep (and bubblewrap's processes)
    e.close()
    e.close()
    assert wait_gone(pids) == [] and uid_processes(uid) == []
    assert not os.path.exists(workdir)


_ORPHAN = """
import json, sys, time
import psutil, skyrl_gym
env = skyrl_gym.make("rlm", env_config={"isolation": sys.argv[1]}, extras={"reward_spec": {"ground_truth": "x"}})
env.init([{"role": "user", "content": "q"}])
env.step("```repl\\nimport subprocess\\np = subprocess.Popen(['sleep', '300'])\\n```")
root = psutil.Process(env.repl.proc.pid)
pids = [root.pid] + [c.pid for c in root.children(recursive=True)]
print(json.dumps({"pids": pids, "uid": env.repl.sandbox.uid, "workdir": env.repl.sandbox.workdir}), flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_kill_9_of_the_env_process_leaves_no_process(isolation):
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, isolation],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    info = json.loads(proc.stdout.readline())
    try:
        assert all(alive(p) for p in info["pids"])
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert wait_gone(info["pids"]) == [] and uid_processes(info["uid"]) == []
    shutil.rmtree(info["workdir"], ignore_errors=True)  # files stay after kill -9; processes do not


def test_model_code_runs_in_the_sandbox_not_here(env):
    out = env.step(block("import os\nprint(os.getpid(), os.getuid())"))
    pid, uid = (int(v) for v in out.observations[0]["content"].split("REPL output:\n\n")[1].split()[:2])
    assert pid != os.getpid()
    if os.geteuid() == 0:
        assert uid == env.repl.sandbox.uid != 0
    if bwrap_usable():
        out = env.step(block(f"print(os.path.exists({str(REPO)!r}))"))
        assert "\nFalse\n" in out.observations[0]["content"]  # the host's files are not visible


# --------------------------------------------------------------------------- hooks and callbacks
class PaperEnv(BaseRLMEnv):
    """A subclass that overrides every hook."""

    def _get_reward(self, final_answer: str) -> float:
        return 0.5 if final_answer == "lisbon" else 0.0

    def _get_system_prompt(self) -> str:
        return "Find the city.{custom_tools_section}\nUse ```repl blocks."

    def _get_repl_tools(self):
        lines = self._context.splitlines()  # the context is set before this hook runs
        return {
            "grep": {
                "tool": lambda word: [ln for ln in lines if word in ln],
                "description": "Lines with a word",
            },
            "crate_ids": [17, 18],
            "fail": lambda: 1 / 0,
        }


def test_subclass_hooks():
    e = PaperEnv(extras={"extra_info": {"context_text": CONTEXT}})
    try:
        messages, _ = e.init(PROMPT)
        assert messages[0]["content"] == (
            "Find the city.\n4. Custom tools and data available in the REPL:\n"
            "- `grep`: Lines with a word\n- `crate_ids`: A custom list value\n- `fail`: A custom function"
            "\nUse ```repl blocks."
        )
        out = e.step(block("hits = grep('Lisbon')\nprint(hits, crate_ids)"))
        text = out.observations[0]["content"]
        assert "['Crate 17 went to Lisbon.'] [17, 18]" in text
        assert "REPL variables: ['context_0', 'context', 'crate_ids', 'hits']" in text
        out = e.step(block("fail()"))
        assert (
            "RuntimeError: fail() failed: ZeroDivisionError: division by zero"
            in out.observations[0]["content"]
        )
        out = e.step(block("grep = None\ncrate_ids = 0\nprint(len(grep('Oslo')), crate_ids)"))
        assert "TypeError" in out.observations[0]["content"]
        assert "\n1 [17, 18]\n" not in out.observations[0]["content"]
        out = e.step(block("print(len(grep('Oslo')))"))  # the scaffold came back after the cell
        assert "\n1\n" in out.observations[0]["content"]
        out = e.step(block("city = hits[0].split()[-1].rstrip('.').lower()") + "FINAL_VAR(city)")
        assert out.done and out.reward == 0.5
    finally:
        e.close()

    class Clash(BaseRLMEnv):
        def _get_repl_tools(self):
            return {"context": "x"}

    e = Clash(extras={})
    with pytest.raises(ConfigError, match="reserved"):
        e.init(PROMPT)
    e.close()


def test_lm_callback_and_subcalls():
    seen = []

    def lm(prompts):
        seen.extend(prompts)
        return [p.upper() for p in prompts]

    def sub(prompt, context=None):
        return "[1, 2]" if context else "child"

    e = make({"lm_callback": lm, "subcall_fn": sub})
    try:
        messages, _ = e.init(PROMPT)
        assert "- `llm_query(prompt)` — make a direct LLM call, returns str" in messages[0]["content"]
        code = "print(llm_query('hi'), llm_query_batched(['a', 'b']), rlm_query('q'), rlm_query('q', context='c'))"
        out = e.step(block(code))
        assert "\nHI ['A', 'B'] child [1, 2]\n" in out.observations[0]["content"]
        assert seen == ["hi", "a", "b"]
        out = e.step(block("print(rlm_query_batched(['x', 'y'], context_list=['c', None]))"))
        assert "\n[[1, 2], 'child']\n" in out.observations[0]["content"]
    finally:
        e.close()
    with pytest.raises(ConfigError, match="lm_callback"):
        make({"subcall_fn": sub})
    with pytest.raises(ConfigError, match="callable"):
        make({"lm_callback": "not a function"})
    e = make()
    e.init(PROMPT)
    try:
        assert "NameError" in e.step(block("llm_query('x')")).observations[0]["content"]  # none without one
    finally:
        e.close()


# --------------------------------------------------------------------------- registration and config
def test_rlm_id_and_import_paths():
    from skyrl_gym.envs.rlm.env import BaseRLMEnv as FromEnv

    assert FromEnv is BaseRLMEnv and issubclass(RLMEnv, BaseRLMEnv)
    e = make()
    assert isinstance(e, RLMEnv) and e.max_turns == 10 and e.repl_timeout_s == 180.0
    e.close()
    with pytest.raises(ConfigError, match="ground_truth"):
        skyrl_gym.make("rlm", extras={})
    with pytest.raises(ConfigError, match="Did you mean 'max_turns'"):
        make(env_config={"max_turn": 3})
    with pytest.raises(ConfigError, match="max_turns"):
        make({"max_turns": 0})
    with pytest.raises(ConfigError, match="repl_timeout"):
        make({"repl_timeout": -1})
    e = make({"reward_spec": {"ground_truth": ["Heron 42", "heron-42"]}})
    assert e._get_reward("HERON   42") == 1.0 and e._get_reward("heron") == 0.0
    e.close()


def test_check_env_passes():
    example = RLMEnv.example()
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make("rlm", env_config=dict(example.env_config), extras=dict(example.extras))
    )
    assert "good actions earn reward" in report.checks and "seeded determinism" in report.checks


# --------------------------------------------------------------------------- parsing
_BLOCK = re.compile(r"```repl\s*\n(.*?)\n```", re.DOTALL)
_FINAL_VAR = re.compile(r"^\s*FINAL_VAR\((.*?)\)", re.MULTILINE | re.DOTALL)
_FINAL = re.compile(r"^\s*FINAL\((.*)\)\s*$", re.MULTILINE | re.DOTALL)


def test_parsers_find_what_the_published_patterns_find():
    tokens = [
        "```repl",
        "```",
        "\n",
        " ",
        "\t",
        "x",
        ")",
        "(",
        "FINAL(",
        "FINAL_VAR(",
        "'",
        '"',
        "\r",
        "\u2003",
    ]
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 14)))
        blocks, names, finals = _BLOCK.findall(text), _FINAL_VAR.findall(text), _FINAL.findall(text)
        assert find_code_block(text) == (blocks[-1].strip() if blocks else None), repr(text)
        expected = names[-1].strip().strip('"').strip("'").strip().strip("\"'") if names else None
        assert find_final_var(text) == expected, repr(text)
        assert find_final(text) == (finals[-1].strip() if finals else None), repr(text)


def test_parsers_take_linear_time_on_hostile_text():
    t0 = time.monotonic()
    for text in ("\n" * 1_000_000, "```repl\nx " * 100_000, " FINAL(" * 100_000, ")" * 1_000_000):
        find_code_block(text), find_final_var(text), find_final(text)
    assert time.monotonic() - t0 < 5  # the published patterns take minutes on the first two


# --------------------------------------------------------------------------- the runtime
def test_one_episode_through_the_agent_loop():
    pytest.importorskip("transformers")
    from skyrl_agent.loop import EpisodeInfo, run_episode
    from skyrl_agent.models import load_tokenizer
    from skyrl_agent.policies.fake import ScriptedPolicy
    from skyrl_agent.types import RolloutConfig, StopReason

    tokenizer = load_tokenizer()
    script = [
        block("lines = context.splitlines()\nprint(len(lines))"),
        "No code this time.",
        block("answer = [l for l in lines if 'password' in l][0].split()[-1].rstrip('.')"),
        "FINAL_VAR(answer)",
    ]
    env = make()
    traj = asyncio.run(
        run_episode(
            ScriptedPolicy(tokenizer, script),
            env,
            PROMPT,
            config=RolloutConfig(max_turns=6, max_tokens_per_turn=128, keep_messages=True),
            info=EpisodeInfo(seed=0),
        )
    )
    traj.validate()
    assert traj.stop_reason == StopReason.ENV_DONE and not traj.masked
    assert traj.reward == 1.0 and traj.turn_rewards == [0.0, 0.0, 0.0, 1.0]
    text = tokenizer.decode(traj.response_ids)
    assert "REPL output:\n\n4\n" in text and NO_BLOCK_MESSAGE in text
    assert env.repl is None  # the loop closed the env
    reminders = [m for m in traj.messages if m["content"].startswith("The history before is")]
    assert len(reminders) == 3  # one after each observation; none is removed from the history
