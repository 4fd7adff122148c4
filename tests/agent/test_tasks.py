"""Tasks load from JSONL, Parquet and `datasets` with the published columns; tasks and
trajectories round-trip through `datasets.Dataset` and Parquet."""

import json

import pytest

import skyrl_gym
from skyrl_agent.engine import PromptItem, RolloutEngine, load_prompts
from skyrl_agent.io import from_dataset, load_parquet, save_parquet, to_dataset
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.tasks import item_to_row, load_tasks, row_to_item, save_tasks, tasks_to_dataset
from skyrl_agent.types import RolloutConfig
from skyrl_gym.errors import ConfigError

datasets = pytest.importorskip("datasets")

ENV_ID = "test-agent-tasks-echo"

# the columns of a published SkyRL dataset (e.g. the gsm8k and SQL ones)
PUBLISHED_ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [
            {"role": "system", "content": "Think step by step."},
            {"role": "user", "content": "What is 2+3?"},
        ],
        "env_class": ENV_ID,
        "reward_spec": {"method": "rule", "ground_truth": "5"},
        "extra_info": {"split": "train", "index": 0},
    },
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 4*4?", "name": "alice"}],
        "env_class": ENV_ID,
        "reward_spec": {"method": "rule", "ground_truth": "16"},
        "extra_info": {"split": "train", "index": 1},
    },
]


@pytest.fixture(autouse=True)
def _registered():
    skyrl_gym.register(ENV_ID, "tests.agent.envs:EchoEnv")
    yield
    skyrl_gym.deregister(ENV_ID)


def _check_published(items):
    assert [i.env_id for i in items] == [ENV_ID, ENV_ID] and [i.prompt_id for i in items] == ["0", "1"]
    assert items[0].prompt == tuple(PUBLISHED_ROWS[0]["prompt"])
    assert items[1].prompt == ({"role": "user", "content": "What is 4*4?", "name": "alice"},)
    for item, row in zip(items, PUBLISHED_ROWS, strict=True):
        # every column but the prompt and the env id reaches the env's extras
        assert item.extras == {k: row[k] for k in ("data_source", "reward_spec", "extra_info")}


def test_published_columns_from_jsonl_parquet_and_datasets(tmp_path):
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in PUBLISHED_ROWS))
    ds = datasets.Dataset.from_list(PUBLISHED_ROWS)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "shards").mkdir()
    ds.to_parquet(str(tmp_path / "shards" / "part-0.parquet"))
    for source in (
        jsonl,
        tmp_path / "train.parquet",  # a struct column gives message 0 a 'name': None, dropped on load
        tmp_path / "saved",
        tmp_path / "shards",
        ds,
        datasets.DatasetDict({"train": ds}),
        PUBLISHED_ROWS,
    ):
        _check_published(load_tasks(source))
    _check_published(load_prompts(tmp_path / "train.parquet"))  # the CLI's --prompts reads Parquet too
    assert [i.prompt_id for i in load_tasks(ds, limit=1)] == ["0"]
    assert load_tasks(datasets.DatasetDict({"train": ds, "test": ds}), split="test")[1].prompt_id == "1"


def test_bad_sources_say_how_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="pass split"):
        load_tasks(datasets.DatasetDict({"train": datasets.Dataset.from_list(PUBLISHED_ROWS), "test": []}))
    with pytest.raises(ConfigError, match="no 'prompt' column"):
        load_tasks([{"env_class": ENV_ID}])
    with pytest.raises(ConfigError, match="no env id"):
        load_tasks([{"prompt": "hi"}])
    with pytest.raises(ConfigError, match=r"prompt\[0\] must be a message"):
        load_tasks([{"prompt": ["hi"], "env_class": ENV_ID}])
    with pytest.raises(ConfigError, match="does not exist"):
        load_tasks(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "env_class": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        load_tasks(bad)
    with pytest.raises(ConfigError, match=".csv"):
        load_tasks(tmp_path.joinpath("t.csv").touch() or tmp_path / "t.csv")


def test_tasks_roundtrip_through_rows_jsonl_parquet_and_datasets(tmp_path):
    items = [
        PromptItem(
            ENV_ID,
            ({"role": "user", "content": f"q{i}"},),
            {"db": "x.sqlite"},
            {
                "reward_spec": {"method": "rule", "ground_truth": str(i)},
                "extra_info": {"i": i},
                "max_turns": 2,
            },
            f"t{i}",
        )
        for i in range(3)
    ]
    assert [row_to_item(item_to_row(i)) for i in items] == items
    assert load_tasks(save_tasks(items, tmp_path / "t.jsonl")) == items
    assert load_tasks(save_tasks(items, tmp_path / "t.parquet")) == items
    ds = tasks_to_dataset(items)
    assert set(ds.column_names) >= {"prompt", "env_class", "reward_spec", "extra_info", "id"}
    assert load_tasks(ds) == items


def test_tasks_from_a_dataset_play_and_trajectories_export(tokenizer, tmp_path):
    items = load_tasks(datasets.Dataset.from_list(PUBLISHED_ROWS))
    result = RolloutEngine(
        ScriptedPolicy(tokenizer, ["DONE"]), RolloutConfig(n_samples=2), progress=False
    ).run_sync(items)
    trajs = result.trajectories
    assert len(trajs) == 4 and result.stats.masked == 0 and {t.prompt_id for t in trajs} == {"0", "1"}
    ds = to_dataset(trajs)
    assert ds.num_rows == 4 and {"prompt_ids", "response_ids", "loss_mask", "reward"} <= set(ds.column_names)
    assert from_dataset(ds) == trajs
    assert load_parquet(save_parquet(trajs, tmp_path / "r.parquet")) == trajs
    # a Parquet file of trajectories also loads through `datasets` itself
    again = datasets.load_dataset("parquet", data_files=str(tmp_path / "r.parquet"), split="train")
    assert from_dataset(again) == trajs
