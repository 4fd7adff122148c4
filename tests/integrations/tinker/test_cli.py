"""``skyrl tinker serve``: the verb parses, and the server it starts answers the official client."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from integrations.tinker import cli

ROOT = Path(__file__).resolve().parents[3]


def test_the_verb_parses():
    parser = argparse.ArgumentParser(prog="skyrl")
    cli.add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tinker", "serve", "--port", "0", "--model", "m=/x", "--device", "cpu"])
    assert args.handler is cli._serve and args.port == 0 and args.model == ["m=/x"]
    with pytest.raises(ValueError, match="NAME=PATH"):
        cli._serve(parser.parse_args(["tinker", "serve", "--model", "no-path"]))


@pytest.mark.slow
def test_serve_starts_a_server_the_client_can_use(tmp_path):
    tinker = pytest.importorskip("tinker")
    from tinker import types

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "integrations.tinker", "--port", "0", "--checkpoint-dir", str(tmp_path)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("tinker server at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].strip()
        client = tinker.ServiceClient(base_url=url, api_key="tml-cli-test")
        sampler = client.create_sampling_client(base_model="tiny-random").result()
        res = sampler.sample(
            types.ModelInput.from_ints([1, 2, 3]), 1, types.SamplingParams(max_tokens=3)
        ).result()
        assert 1 <= len(res.sequences[0].tokens) <= 3
        client.close("success").result()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
