import argparse
from dataclasses import dataclass
from typing import Literal

import pytest

from skyrl_gym.config import add_config_arguments, config_from_args, field_docs


@dataclass(frozen=True)
class DemoConfig:
    lr: float = 1e-5
    """Learning rate of
    the optimizer."""
    name: str | None = None
    """A name."""
    bf16: bool = True
    """Use bf16 autocast."""
    mode: Literal["a", "b"] = "a"
    """Mode."""
    stops: tuple[str, ...] = ()
    """Stop strings."""


def test_field_docs_read_from_source():
    docs = field_docs(DemoConfig)
    assert docs["lr"] == "Learning rate of the optimizer."
    assert docs["stops"] == "Stop strings."


def test_flags_map_onto_the_dataclass():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, DemoConfig)
    args = parser.parse_args(["--lr", "0.1", "--no-bf16", "--mode", "b", "--stops", "x", "y", "--name", "n"])
    assert config_from_args(DemoConfig, args) == DemoConfig(
        lr=0.1, name="n", bf16=False, mode="b", stops=("x", "y")
    )
    assert config_from_args(DemoConfig, parser.parse_args([])) == DemoConfig()
    assert "Learning rate of the optimizer." in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])
