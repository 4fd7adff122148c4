"""Recipes: each has a README with a smoke run and valid configs; the SkyRL-SQL parts work on
real SQLite databases (the bundled ones, laid out as the published data is)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

from skyrl_gym.errors import ConfigError
from tests.docs._markdown import REPO, parse_page

RECIPES = sorted(p for p in (REPO / "examples").iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
# every flags file of `skyrl train` (examples/trl/ holds flags of examples/trl_text2sql.py's own
# parser, which `--group` and `--prompts` are; they parsed here once only as abbreviations)
FLAGS = sorted(p for p in (REPO / "examples").rglob("*.flags") if p.parent.name != "trl")


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


recipe = _load("recipe", REPO / "examples" / "skyrl_sql" / "recipe.py")
cpu_data = _load("cpu_data", REPO / "examples" / "skyrl_sql" / "cpu_data.py")
search_data = _load("search_cpu_data", REPO / "examples" / "search" / "cpu_data.py")


@pytest.mark.parametrize("folder", RECIPES, ids=lambda p: p.name)
def test_recipe_has_a_readme_with_a_smoke_run(folder):
    readme = folder / "README.md"
    assert readme.is_file(), f"{folder.name}/ needs a README.md"
    page = parse_page(readme)
    smoke = [b for b in page.blocks if b.lang == "bash" and b.runs]
    assert smoke, f"{readme.relative_to(REPO)} needs a smoke run: a ```bash run block"


@pytest.mark.parametrize("path", FLAGS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_flags_file_is_a_valid_train_config(path):
    cfg = recipe.train_config(recipe.read_flags(path))
    assert cfg.data.env and cfg.model.path


def test_read_flags_strips_comments_and_keeps_stop_strings(tmp_path):
    f = tmp_path / "x.flags"
    f.write_text("# a comment\n--lr 1e-6   # trailing\n--stop </sql> </solution>\n\n")
    assert recipe.read_flags(f) == ["--lr", "1e-6", "--stop", "</sql>", "</solution>"]


def test_gpu_flags_match_the_published_recipe():
    cfg = recipe.train_config(recipe.read_flags(REPO / "examples" / "skyrl_sql" / "gpu.flags"))
    assert cfg.model.path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert (cfg.algorithm.advantage, cfg.algorithm.kl_coef, cfg.optimizer.lr) == ("grpo", 0.0, 1e-6)
    assert (cfg.run.prompts_per_step, cfg.rollout.n_samples, cfg.optimizer.updates_per_step) == (256, 5, 1)
    assert (cfg.rollout.sampling.temperature, cfg.rollout.sampling.top_p) == (0.6, 0.95)
    assert cfg.rollout.sampling.stop == ("</sql>", "</solution>")
    assert (cfg.rollout.max_turns, cfg.rollout.observation_style) == (6, "inline")


def _published_layout(tmp_path, layout: str = "spider/database"):
    """The bundled databases copied where the published data keeps Spider's, and rows for them."""
    from skyrl_gym.envs.sql import bundled_db_dir, load_bundled_rows

    root = tmp_path / "sql_data"
    rows = []
    for r in load_bundled_rows("eval")[:4]:
        db = r["db_id"]
        target = root / layout / db
        if not target.exists():
            target.mkdir(parents=True)
            shutil.copy(bundled_db_dir() / db / f"{db}.sqlite", target / f"{db}.sqlite")
        rows.append({**r, "data": "spider"})
    return root, rows


def test_published_rows_load_when_the_databases_are_there(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, rows = _published_layout(tmp_path)
    data = tmp_path / "skyrl-sql-653"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), data / "train.parquet")
    loaded = recipe.load_published_rows(data, root)
    assert [r["db_id"] for r in loaded] == [r["db_id"] for r in rows]

    shutil.rmtree(root / "spider" / "database" / rows[0]["db_id"])
    with pytest.raises(ConfigError, match=r"missing under .*spider/database.*OmniSQL"):
        recipe.load_published_rows(data, root)
    with pytest.raises(ConfigError, match="huggingface-cli download NovaSky-AI/SkyRL-SQL-653-data-newfmt"):
        recipe.load_published_rows(tmp_path / "nowhere", root)


def test_prepare_run_binds_the_database_root_and_the_turn_budget(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import skyrl_gym

    root, rows = _published_layout(tmp_path)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    flags = recipe.read_flags(REPO / "examples" / "skyrl_sql" / "gpu.flags") + [
        "--run-dir",
        str(tmp_path / "run"),
    ]
    cfg = recipe.prepare_run(recipe.train_config(flags), str(tmp_path / "train.parquet"), str(root))
    written = [json.loads(line) for line in open(cfg.data.path)]
    assert len(written) == 4 and all(r["max_turns"] == 6 for r in written)
    try:
        env = skyrl_gym.make(cfg.data.env, extras=written[0])  # finds the database under the bound root
        assert env.max_turns == 6 and str(env.db_file).startswith(str(root))
        env.close()
    finally:
        skyrl_gym.deregister(cfg.data.env)  # leave the registry as other tests expect it


def test_spider_style_split_is_scored_and_tabled(tmp_path):
    """A Spider-style question file on real databases, played by a policy that answers the gold
    query: 100% execution accuracy; one that writes no solution: 0% and reward -1."""
    from skyrl_agent.models import load_tokenizer
    from skyrl_agent.policies.fake import ScriptedPolicy
    from skyrl_gym.envs.sql import bundled_db_dir, bundled_questions

    questions = [q for q in bundled_questions("eval")][:3]
    spider = tmp_path / "dev.json"
    spider.write_text(
        json.dumps([{"db_id": q["db_id"], "question": q["question"], "query": q["sql"]} for q in questions])
    )
    name, file, db_dir = recipe.parse_split(f"Dev={spider}@{bundled_db_dir()}")
    split = recipe.load_split(name, file, db_dir, max_turns=2)
    assert len(split.rows) == 3 and split.rows[0]["data"] == "spider"

    tok = load_tokenizer()
    gold = {q["question"]: q["sql"] for q in questions}

    def answer(prompt_ids, index):
        text = tok.decode(prompt_ids)
        sql = next(s for q, s in gold.items() if q in text)
        return f"<think>I know this one.</think><solution>{sql}</solution>"

    right = recipe.evaluate_splits(ScriptedPolicy(tok, answer), [split], max_turns=2)
    wrong = recipe.evaluate_splits(ScriptedPolicy(tok, ["no idea"]), [split], max_turns=2)
    assert right["Dev"].accuracy == 1.0 and right["Dev"].masked == 0
    assert wrong["Dev"].accuracy == 0.0 and wrong["Dev"].reward == -1.0
    table = recipe.results_table({"oracle": right, "mute": wrong})
    assert table.splitlines()[0] == "| Model | Dev | Avg |"
    assert "| oracle | 100.0 | 100.0 |" in table and "| mute | 0.0 | 0.0 |" in table

    with pytest.raises(ConfigError, match="NAME=FILE"):
        recipe.parse_split("Dev")
    with pytest.raises(ConfigError, match="does not exist"):
        recipe.load_split("Dev", spider, tmp_path / "no-dbs")


def _columns(dom) -> set[str]:
    return {dom.table, dom.key, dom.kind, dom.amount}


def test_cpu_sql_task_holds_out_schemas_and_wordings(tmp_path):
    """The CPU-sized SkyRL-SQL task: no table or column name of a held-out schema is in a training
    schema, no held-out question uses a training wording, and every gold query runs on its real
    database and returns rows; the files are the same for the same seed."""
    import re

    from skyrl_gym.envs.sql import execute, resolve_db_file

    train_names = set().union(*map(_columns, cpu_data.TRAIN_DOMAINS))
    eval_names = set().union(*map(_columns, cpu_data.EVAL_DOMAINS))
    assert not train_names & eval_names, train_names & eval_names
    train_file, eval_file = cpu_data.write_task(tmp_path / "a", max_turns=3, seed=5)
    rows = {s: [json.loads(x) for x in open(f)] for s, f in (("train", train_file), ("eval", eval_file))}
    assert len(rows["train"]) > 200 and len(rows["eval"]) > 50
    assert not {r["db_id"] for r in rows["train"]} & {r["db_id"] for r in rows["eval"]}
    for split, others in (("train", eval_names), ("eval", train_names)):
        schemas = " ".join(r["prompt"][-1]["content"].split("Question:")[0] for r in rows[split])
        assert not set(re.findall(r"\w+", schemas)) & others, split
    # one wording per split: the held-out question text never matches a training template
    for shape, train_text, _held_out_text, _ in cpu_data.SHAPES:
        stem = lambda t: re.escape(t).replace(r"\{", "{").replace(r"\}", "}")  # noqa: E731
        pattern = re.compile("^" + re.sub(r"\{\w\}", ".+", stem(train_text)) + "$")
        held = [r for r in rows["eval"] if r["extra_info"]["shape"] == shape]
        assert held and not any(pattern.match(r["extra_info"]["question"]) for r in held), shape
    for r in rows["train"] + rows["eval"]:
        assert r["max_turns"] == 3 and r["data"] == "spider"
        db_file = resolve_db_file(r["db_id"], r["data"], str(tmp_path / "a"))
        res = execute(db_file, r["reward_spec"]["ground_truth"])
        assert res.ok and res.rows, (r["id"], res)
    again = cpu_data.write_task(tmp_path / "b", max_turns=3, seed=5)
    assert [open(p).read().count("\n") for p in again] == [len(rows["train"]), len(rows["eval"])]
    assert open(again[1]).read() == open(eval_file).read()


def test_cpu_sql_task_scores_the_gold_answer_in_the_env(tmp_path):
    """A held-out row of the generated task, played in the real text2sql env: the gold query as the
    solution scores 1, a wrong one 0."""
    import skyrl_gym

    _, eval_file = cpu_data.write_task(tmp_path, max_turns=3)
    row = json.loads(open(eval_file).readline())
    gold = row["reward_spec"]["ground_truth"]
    for answer, reward in ((gold, 1.0), ("SELECT 12345", 0.0)):
        env = skyrl_gym.make("text2sql", env_config={"db_path": str(tmp_path)}, extras=row)
        env.init(row["prompt"])
        out = env.step(f"<think>look</think><sql>{gold}</sql>")
        assert not out.done and "<observation>" in out.observations[0]["content"]
        out = env.step(f"<think>done</think><solution>{answer}</solution>")
        assert out.done and out.reward == reward
        env.close()


def test_cpu_search_task_holds_out_people_towns_jobs_and_wordings(tmp_path):
    """The CPU-sized search task: the held-out corpus shares no name, town or job with the
    training corpus, its questions no training wording; the files are the same for the same
    seed."""
    train_file, eval_file = search_data.write_task(tmp_path / "a", seed=3)
    rows = {s: [json.loads(x) for x in open(f)] for s, f in (("train", train_file), ("eval", eval_file))}
    assert len(rows["train"]) == 128 and len(rows["eval"]) == 64
    words = {}
    for split in ("train", "eval"):
        notes = [json.loads(x) for x in open(tmp_path / "a" / f"{split}_corpus.jsonl")]
        words[split] = {w.strip(".") for n in notes for w in (n["title"] + " " + n["text"]).split()}
        assert {r["env_config"]["corpus_path"] for r in rows[split]} == {
            str(tmp_path / "a" / f"{split}_corpus.jsonl")
        }
    assert words["train"] & words["eval"] == {"name:", "town:", "job:"}
    for kind, train_text, eval_text in search_data.KINDS:
        train_stem, eval_stem = train_text.split("{p}")[0], eval_text.split("{p}")[0]
        assert train_stem != eval_stem
        held = [r for r in rows["eval"] if r["extra_info"]["kind"] == kind]
        assert held and all(r["extra_info"]["question"].startswith(eval_stem) for r in held)
    again = search_data.write_task(tmp_path / "b", seed=3)
    assert open(again[1]).read().replace("/b/", "/a/") == open(eval_file).read()


def test_cpu_search_task_in_the_env(tmp_path):
    """Every person's own note is the first hit for their name (the others share a name with
    them); the prompt's solved examples show observations exactly as the env writes them; the
    right answer scores 1 and a neighbour's town 0."""
    import skyrl_gym
    from skyrl_gym.envs.search.env import bm25_index

    _, eval_file = search_data.write_task(tmp_path)
    for split in ("train", "eval"):
        index = bm25_index(str(tmp_path / f"{split}_corpus.jsonl"))
        for person in search_data.people(split):
            hits = index.search([person.name], 3)[0]
            assert hits[0].passage.title == person.name and len(hits) == 3, person.name
    example_notes = tmp_path / "examples.jsonl"
    search_data.write_corpus(example_notes, list(search_data._EXAMPLE_PEOPLE.values()))
    shown = [t["content"] for t in search_data.EXAMPLES if "<information>" in t["content"]]
    for (name, *_), text in zip(search_data._EXAMPLE_SCRIPT, shown, strict=True):
        extras = {"reward_spec": {"ground_truth": {"target": "?"}}}
        env = skyrl_gym.make(
            "search", env_config={"corpus_path": str(example_notes), "topk": 3}, extras=extras
        )
        env.init([{"role": "user", "content": "?"}])
        assert env.step(f"<search>{name}</search>").observations[0]["content"] == text
    rows = [json.loads(x) for x in open(eval_file)]
    row = next(r for r in rows if r["extra_info"]["kind"] == "town")
    other = next(
        p for p in search_data.people("eval") if p.town != row["reward_spec"]["ground_truth"]["target"][0]
    )
    for answer, reward in ((row["reward_spec"]["ground_truth"]["target"][0], 1.0), (other.town, 0.0)):
        env = skyrl_gym.make("search", env_config=row["env_config"], extras=row)
        env.init(row["prompt"])
        obs = env.step(f"<search>{row['extra_info']['person']}</search>").observations[0]["content"]
        assert f"Title: {row['extra_info']['person']})" in obs
        out = env.step(f"<answer>{answer}</answer>")
        assert out.done and out.reward == reward
        assert env.get_metrics()["answer_supported"] == (reward == 1.0 or other.town in obs)


cpu_run = _load("sql_cpu_run", REPO / "examples" / "skyrl_sql" / "cpu_run.py")


@pytest.mark.parametrize("hidden, examples", [(None, 1), ("create", 1), ("create", 3)])
def test_sql_cpu_run_trains_text2sql_on_the_task_it_wrote(tmp_path, hidden, examples):
    """The run's config keeps cpu.flags' env and settings and points at the generated rows and
    databases (a whole-part replace once sent this recipe to the default env)."""
    flags = recipe.train_config(recipe.read_flags(REPO / "examples" / "skyrl_sql" / "cpu.flags"))
    cfg, eval_file = cpu_run.with_task(flags, tmp_path / "data", hidden=hidden, examples=examples)
    assert cfg.data.env == "text2sql" and cfg.data.path == str(tmp_path / "data" / "train.jsonl")
    assert cfg.data.eval_data == str(eval_file) and eval_file == tmp_path / "data" / "eval.jsonl"
    assert f"text2sql.db_path={(tmp_path / 'data').resolve()}" in cfg.data.env_config
    assert (cfg.rollout.max_turns, cfg.optimizer.lr, cfg.rollout.sampling.stop) == (
        3,
        1e-5,
        ("</sql>", "</solution>"),
    )
    rows = [json.loads(line) for line in open(cfg.data.path)]
    assert rows and all(r["max_turns"] == 3 for r in rows)
    assert all(r.get("env_config", {}).get("hide_schema", False) == (hidden is not None) for r in rows)
    shown = sum(m["content"].startswith("Database: ") for m in rows[0]["prompt"])
    assert shown == (examples + 1 if hidden else 0)  # the worked episodes' questions and the row's
