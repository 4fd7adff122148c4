"""`skyrl view`: a static HTML page of episodes (turns, tokens colored by loss mask, rewards,
stop reasons), from real rollouts."""

import argparse
import html.parser
import json
import shutil
import subprocess
import threading
import tomllib
import urllib.request
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.io import save_jsonl, save_parquet
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig
from skyrl_agent.viewer import add_command, load_episodes, make_server, render_html, write_view
from skyrl_gym.errors import ConfigError
from tests.agent.envs import per_episode_script

ENV_ID = "test-agent-view-echo"


@pytest.fixture(scope="module")
def trajectories(tokenizer):
    skyrl_gym.register(ENV_ID, "tests.agent.envs:EchoEnv")
    try:
        policy = ScriptedPolicy(tokenizer, per_episode_script(tokenizer, ["look <b>&", "DONE"]))
        items = [PromptItem(ENV_ID, ({"role": "user", "content": "task <i>"},), {}, {}, "p0")]
        items.append(PromptItem(ENV_ID, ({"role": "user", "content": "t"},), {}, {"crash_on": 1}, "p1"))
        cfg = RolloutConfig(max_turns=3, max_retries=0, n_samples=2)
        return RolloutEngine(policy, cfg, progress=False).run_sync(items).trajectories
    finally:
        skyrl_gym.deregister(ENV_ID)


class _Collect(html.parser.HTMLParser):
    """Counts elements by class and collects text: a real parse of the page."""

    def __init__(self):
        super().__init__()
        self.classes, self.text, self.ids = {}, [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for c in (a.get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if "id" in a:
            self.ids.add(a["id"])

    def handle_data(self, data):
        self.text.append(data)


def _parse(page):
    p = _Collect()
    p.feed(page)
    return p, "".join(p.text)


def test_page_shows_turns_tokens_masks_rewards_and_stop_reasons(trajectories, tokenizer, tmp_path):
    good = [t for t in trajectories if not t.masked]
    page = render_html([e for e in load_episodes(save_jsonl(trajectories, tmp_path / "r.jsonl"))], tokenizer)
    p, text = _parse(page)
    assert (
        p.ids >= {"summary", "episodes", "ep-0", "ep-3"} and p.classes["ep"] == 4 and p.classes["masked"] == 2
    )
    # every token of every episode, colored by its loss mask
    assert p.classes["prompt"] == sum(len(t.prompt_ids) for t in trajectories) + 1  # + the legend
    assert p.classes["m1"] == sum(sum(t.loss_mask) for t in trajectories) + 1
    assert p.classes["m0"] == sum(len(t.loss_mask) - sum(t.loss_mask) for t in trajectories) + 1
    assert p.classes["reward"] == sum(t.num_turns for t in trajectories) + 1  # one marker per turn
    # turns by role, text escaped (the model wrote "<b>&", the prompt "<i>")
    assert "look <b>&" in text and "task <i>" in text and "<b>" not in page.replace("&lt;b&gt;", "")
    assert "r=0.1" in text and "r=1" in text and "env_done" in text and "env_error" in text
    assert "sandbox went away" in text and "episodes4" in text.replace(" ", "").replace("\n", "")
    assert f"mean reward (unmasked){sum(t.reward for t in good) / len(good):.4f}" in text
    assert "<svg" in page and page.count("<rect") >= 1  # the reward histogram


def test_run_directory_parquet_trainer_lines_and_cli(trajectories, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # the trainer's trajectories.jsonl: each line also carries the step
    with open(run / "trajectories.jsonl", "w") as f:
        for t in trajectories:
            f.write(json.dumps({"step": 7, **t.to_dict()}) + "\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')  # not trajectories: skipped
    save_parquet(trajectories[:1], run / "eval" / "a.parquet")
    episodes = load_episodes(run)
    assert len(episodes) == 5 and sorted({e.step for e in episodes}, key=str) == [7, None]
    parser = argparse.ArgumentParser(prog="skyrl")
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["view", str(run), "--tokenizer", "none"])
    assert args.handler(args) == 0
    page = (run / "view.html").read_text()
    assert (
        "wrote" in capsys.readouterr().out
        and "step 7" in page
        and f"[{trajectories[0].prompt_ids[0]}]" in page
    )
    with pytest.raises(ConfigError, match="no trajectory files"):
        load_episodes(_empty(tmp_path))
    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["skyrl.cli"]["view"] == "skyrl_agent.viewer:add_command"


def _empty(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"loss": 1}\n')
    return d


def test_serve_answers_on_localhost(trajectories, tokenizer, tmp_path):
    path = write_view(save_jsonl(trajectories, tmp_path / "r.jsonl"), tokenizer=tokenizer)
    assert path == tmp_path / "r.html"
    with make_server(path) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        host, port = server.server_address
        assert host == "127.0.0.1"
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        finally:
            server.shutdown()
            thread.join(10)
    assert body == path.read_text()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (Debian package `chromium`)")
def test_page_loads_in_headless_chromium(trajectories, tokenizer, tmp_path):
    path = write_view(save_jsonl(trajectories, tmp_path / "r.jsonl"), tokenizer=tokenizer)
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    p, text = _parse(dom)  # the DOM as the browser built it
    assert p.classes["ep"] == 4 and p.classes["m1"] == sum(sum(t.loss_mask) for t in trajectories) + 1
    assert "look <b>&" in text and "sandbox went away" in text
