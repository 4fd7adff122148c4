"""Generation speed of the local sampler: the inference engine against its baselines, one run.

Sections (all on the bundled SmolLM2-135M-Instruct unless ``--model``):

0. **Raw decode**: one sequence, then a batch of 32, calculator prompts (about 360 tokens: the
   system prompt and worked examples), 48 new tokens at temperature 0.8: tokens/s of the engine
   (``HFPolicy``, continuous batching), of ``model.generate()`` and, where ``llama-cpp-python``
   is installed, of llama.cpp on the bundled GGUF file (one stream, 2 threads; that file is
   quantized to 4 bits, Q4_1, so llama.cpp reads about a quarter of the bytes per weight that
   bf16 does). Each prompt is prefilled in full in every column (llama.cpp's own prompt cache is
   reset between prompts), every column generates all 48 tokens (no stop at end-of-sequence),
   and each tool gets one warm-up call. The ratios the issue sets goals for
   are printed. llama.cpp 0.3.36 built with AMX on (its default on AMX CPUs) crashed in its first
   decode on the 2026-12-05 machine; ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON
   -DGGML_AVX512_BF16=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"``
   built one that runs.
1. **The main job's evaluation**: 64 held-out calculator prompts x 4 samples, two turns, at the
   training temperature, played by the rollout engine exactly as ``skyrl train`` evaluates:
   episodes/s and generated tokens/s of the engine (default settings), of the engine with
   cascade attention (``cascade_min_tokens=64``; it only applies under ``--bf16``) or
   explicitly without it (``no-cascade``), of the old static
   micro-batcher (``static``: :mod:`static_policy`, the baseline kept out of the product), and tokens/s of ``model.generate()`` on the same
   first-turn prompts in batches of 32.
2. **Long horizon**: 32 episodes of 12 turns, each turn 16 new tokens then a 60-token observation:
   prompt tokens run through the model per turn (against the tokens that are new in that turn)
   and end-to-end time, with KV reuse and without (``prefix_cache_bytes=0``).

Each figure comes from this run; ratios compare figures of this run only.

    python bench/bench_generation.py                    # all sections
    python bench/bench_generation.py --sections 0 2 --threads 2
    python bench/bench_generation.py --bf16             # the sampler under bf16 autocast
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer  # noqa: E402
from skyrl_agent.policies.hf import EngineConfig, HFPolicy  # noqa: E402
from skyrl_agent.types import GenerateRequest, SamplingParams  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_policy import StaticBatchPolicy  # noqa: E402


def calculator_prompts(
    tokenizer: Any, n: int, split: str = "test", with_tools: bool = False
) -> list[list[int]]:
    """First-turn prompt ids of the calculator env (the main job's), rendered as the runtime does
    but, unless ``with_tools``, without the tool schemas in the system turn (about 360 tokens
    instead of the main job's 558; section 0's figures were always measured so; section 1's
    ``generate()`` column renders them with tools, like the engine's episodes, since 2026-12-04)."""
    from skyrl_agent.chat import ChatRenderer
    from skyrl_gym.envs.calculator import CalculatorEnv, generate_calculator_rows

    renderer = ChatRenderer(tokenizer)
    rows = generate_calculator_rows(n, split=split, seed=0)
    tools = CalculatorEnv(extras={"reward_spec": rows[0]["reward_spec"]}).tool_specs() if with_tools else None
    return [renderer.encode_prompt(list(r["prompt"]), tools) for r in rows]


def _tps(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else float("nan")


def bench_policy(policy: HFPolicy, prompts: list[list[int]], params: SamplingParams) -> tuple[int, float]:
    reqs = [GenerateRequest(p, params.replace(seed=i)) for i, p in enumerate(prompts)]
    start = time.perf_counter()
    outs = policy.generate_sync(reqs)
    return sum(len(o.token_ids) for o in outs), time.perf_counter() - start


def bench_generate(
    model: Any, tokenizer: Any, prompts: list[list[int]], new: int, batch: int
) -> tuple[int, float]:
    """``model.generate()`` in left-padded batches, sampling at temperature 0.8 for ``new`` tokens."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    tokens, start = 0, time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new,
                do_sample=True,
                temperature=0.8,
                top_p=1.0,
                top_k=0,
                pad_token_id=pad,
            )
        for row in out[:, width:].tolist():
            tokens += len(row) - row.count(pad) if pad in row else len(row)
    return tokens, time.perf_counter() - start


def bench_llama_cpp(
    tokenizer: Any, prompts: list[list[int]], new: int, threads: int
) -> list[tuple[int, float]] | None:
    """llama.cpp, one stream: ``(tokens, seconds)`` over ``prompts`` (each prefilled in full),
    then over ``new`` tokens after a one-token prompt (decode alone); None when not installed."""
    try:
        from llama_cpp import Llama, LogitsProcessorList
    except ImportError:
        return None
    from skyrl_agent.models import _gguf_location

    pkg_dir, name = _gguf_location()
    llm = Llama(model_path=str(pkg_dir / name), n_threads=threads, n_ctx=1024, verbose=False)
    llm.create_completion(prompts[0], max_tokens=4)  # warm-up, as the engine gets
    eos = llm.token_eos()

    def no_eos(_ids: Any, scores: Any) -> Any:  # all `new` tokens, as the engine runs (no stop ids)
        scores[eos] = -float("inf")
        return scores

    keep_going = LogitsProcessorList([no_eos])
    results = []
    for group in (prompts, [prompts[0][:1]]):
        tokens, start = 0, time.perf_counter()
        for p in group:
            llm.reset()  # no KV kept from the last prompt: every prompt is prefilled, as for the engine
            out = llm.create_completion(
                p, max_tokens=new, temperature=0.8, top_p=1.0, top_k=0, logits_processor=keep_going
            )
            tokens += out["usage"]["completion_tokens"]
        results.append((tokens, time.perf_counter() - start))
    return results


def section0(args: argparse.Namespace, model: Any, tok: Any, results: dict[str, Any]) -> None:
    prompts = calculator_prompts(tok, 32)
    params = SamplingParams(temperature=0.8, max_tokens=48, stop_token_ids=())
    print(f"\n## 0. raw decode: prompts of {sum(map(len, prompts)) // len(prompts)} tokens, 48 new, T=0.8")
    engine = HFPolicy(model, tok, autocast_bf16=args.bf16, engine=EngineConfig(prefix_cache_bytes=0))
    try:
        bench_policy(engine, prompts[:1], params.replace(max_tokens=4))  # warm-up
        one_at_a_time = [bench_policy(engine, [p], params) for p in prompts[:2]]
        single = (sum(t for t, _ in one_at_a_time), sum(s for _, s in one_at_a_time))
        decode = bench_policy(engine, [prompts[0][:1]], params)  # a one-token prompt: decode alone
        batch = bench_policy(engine, prompts, params)
    finally:
        engine.close()
    gen_single = bench_generate(model, tok, prompts[:2], 48, 1)
    gen_batch = bench_generate(model, tok, prompts, 48, 32)
    lcpp = None if args.no_llama_cpp else bench_llama_cpp(tok, prompts[:2], 48, args.threads)
    rows = {
        "engine_single_tps": _tps(*single),
        "engine_decode_tps": _tps(*decode),
        "engine_batch32_tps": _tps(*batch),
        "generate_single_tps": _tps(*gen_single),
        "generate_batch32_tps": _tps(*gen_batch),
    }
    if lcpp is not None:
        rows["llama_cpp_single_tps"] = _tps(*lcpp[0])
        rows["llama_cpp_decode_tps"] = _tps(*lcpp[1])
    for k, v in rows.items():
        print(f"  {k:<24} {v:8.1f} tokens/s")
    print(
        f"  engine single / generate() single    {rows['engine_single_tps'] / rows['generate_single_tps']:.2f}x"
    )
    print(
        f"  engine batch32 / generate() batch32  {rows['engine_batch32_tps'] / rows['generate_batch32_tps']:.2f}x"
    )
    if lcpp is not None:
        ref = rows["llama_cpp_single_tps"]
        print(
            f"  engine single / llama.cpp single     {rows['engine_single_tps'] / ref:.2f}x   (goal >= 0.5)"
        )
        print(f"  engine batch32 / llama.cpp single    {rows['engine_batch32_tps'] / ref:.2f}x   (goal >= 4)")
        print(
            "  engine decode / llama.cpp decode     "
            f"{rows['engine_decode_tps'] / rows['llama_cpp_decode_tps']:.2f}x   (one-token prompt: decode alone)"
        )
    else:
        print("  llama.cpp: not installed (pip install llama-cpp-python); its ratios are not shown")
    results["section0"] = rows


def section1(args: argparse.Namespace, model: Any, tok: Any, results: dict[str, Any]) -> None:
    from trainers.config import TrainConfig
    from trainers.data import load_items
    from trainers.evaluation import evaluate

    cfg = TrainConfig(eval_prompts=args.eval_prompts, progress=False, bf16=args.bf16)
    rows = load_items(cfg.data.env, "test", cfg.data.eval_prompts, seed=cfg.run.seed)
    print(
        f"\n## 1. the main job's evaluation: {len(rows)} prompts x {cfg.data.eval_samples} samples, two turns"
    )
    out: dict[str, Any] = {}
    rows_cap = max(
        cfg.run.prompts_per_step * cfg.rollout.n_samples, 32
    )  # what `skyrl train` gives its sampler
    variants: dict[str, dict[str, Any]] = {
        "engine": {},
        "cascade": {"engine": EngineConfig(max_rows=rows_cap, cascade_min_tokens=64)},
        "no-cascade": {"engine": EngineConfig(max_rows=rows_cap, cascade_min_tokens=0)},
        # newcomers join at every step: each next turn prefills in its own forward
        "admit-1": {"engine": EngineConfig(max_rows=rows_cap, admit_every=1)},
        # twice the rows a training step samples: does a wider batch pay on this machine?
        "rows-64": {"engine": EngineConfig(max_rows=64)},
        "rows-64-cascade": {"engine": EngineConfig(max_rows=64, cascade_min_tokens=64)},
        "rows-128-cascade": {"engine": EngineConfig(max_rows=128, cascade_min_tokens=64)},
        "static": {"static": True},  # bench/static_policy.py
        # decode steps through the model's forward instead of the written-out Llama step
        "module-step": {"engine": EngineConfig(max_rows=rows_cap, lean_decode_step=False)},
    }
    for name in args.variants:
        if name == "generate":  # plain model.generate(), timed below
            continue
        kw = dict(variants[name])
        make: Any = StaticBatchPolicy if kw.pop("static", False) else HFPolicy
        policy = make(model, tok, max_batch_size=rows_cap, seed=cfg.run.seed, autocast_bf16=args.bf16, **kw)
        generated = 0
        real = policy.generate

        async def counting(requests: Any, real: Any = real) -> Any:
            nonlocal generated
            outs = await real(requests)
            generated += sum(len(o.token_ids) for o in outs)
            return outs

        policy.generate = counting  # type: ignore[method-assign]
        start = time.perf_counter()
        result = evaluate(policy, cfg, rows, seed=cfg.run.seed)
        seconds = time.perf_counter() - start
        stats = policy.engine_stats() if isinstance(policy, HFPolicy) else None
        policy.close()
        out[name] = {
            "episodes_per_s": result.episodes / seconds,
            "tokens_per_s": generated / seconds,
            "seconds": seconds,
            "success": result.success,
        }
        print(
            f"  {name:<10} {result.episodes} episodes in {seconds:6.1f} s: {result.episodes / seconds:6.2f} episodes/s, "
            f"{generated / seconds:7.1f} tokens/s (success {result.success:.3f})"
        )
        if stats is not None and stats.decode_steps:
            print(
                f"             {stats.decode_steps} decode steps of {stats.rows_decoded / stats.decode_steps:.1f} rows "
                f"on average; {stats.prefills} prefills ran {stats.prefill_tokens} prompt tokens "
                f"({stats.reused_tokens} reused)"
            )
            out[name]["mean_rows"] = stats.rows_decoded / stats.decode_steps
    if "generate" in args.variants:
        first_turn = calculator_prompts(tok, len(rows), with_tools=True) * cfg.data.eval_samples
        toks, secs = bench_generate(model, tok, first_turn, cfg.rollout.max_tokens_per_turn, 32)
        out["generate"] = {"tokens_per_s": toks / secs, "seconds": secs}
        print(f"  generate() on the first-turn prompts, batches of 32: {toks / secs:7.1f} tokens/s")
    e = out.get("engine")
    if e and "static" in out:
        ratio = e["episodes_per_s"] / out["static"]["episodes_per_s"]
        print(f"  engine / static episodes/s          {ratio:.2f}x   (goal >= 3)")
    if "cascade" in out and ("no-cascade" in out or e):
        base = out.get("no-cascade", e)
        ratio = out["cascade"]["episodes_per_s"] / base["episodes_per_s"]
        print(f"  cascade / without episodes/s        {ratio:.2f}x")
    if e and "module-step" in out:
        ratio = e["episodes_per_s"] / out["module-step"]["episodes_per_s"]
        print(f"  engine / module-step episodes/s     {ratio:.2f}x")
    if e and "admit-1" in out:
        ratio = e["episodes_per_s"] / out["admit-1"]["episodes_per_s"]
        print(f"  engine / admit_every=1 episodes/s   {ratio:.2f}x")
    if e and "generate" in out:
        ratio = e["tokens_per_s"] / out["generate"]["tokens_per_s"]
        print(f"  engine / generate() tokens/s        {ratio:.2f}x   (goal >= 1.5)")
    results["section1"] = out


async def _long_horizon(
    policy: HFPolicy, episodes: int, turns: int, obs_tokens: int, vocab: int
) -> list[dict[str, float]]:
    """``episodes`` concurrent episodes; returns per-turn prompt/new/prefilled token counts."""
    per_turn = [{"new": 0, "prompt": 0} for _ in range(turns)]
    rng = random.Random(0)
    starts = [[rng.randrange(100, vocab) for _ in range(150)] for _ in range(episodes)]

    async def episode(i: int) -> None:
        ctx, seen = starts[i], 0  # seen: the previous turn's prompt length
        for t in range(turns):
            params = SamplingParams(temperature=0.8, max_tokens=16, seed=i * 1000 + t, stop_token_ids=())
            [out] = await policy.generate([GenerateRequest(list(ctx), params)])
            per_turn[t]["prompt"] += len(ctx)
            per_turn[t]["new"] += len(ctx) - seen  # the last response and observation
            seen = len(ctx)
            ctx = ctx + out.token_ids + [rng.randrange(100, vocab) for _ in range(obs_tokens)]

    await asyncio.gather(*(episode(i) for i in range(episodes)))
    return per_turn


def section2(args: argparse.Namespace, model: Any, tok: Any, results: dict[str, Any]) -> None:
    E, T, obs = args.long_episodes, args.long_turns, 60
    print(
        f"\n## 2. long horizon: {E} episodes x {T} turns, 16 new tokens and a {obs}-token observation a turn"
    )
    out: dict[str, Any] = {}
    vocab = len(tok)
    for name, cache_bytes in (("reuse", 4 << 30), ("no reuse", 0)):
        policy = HFPolicy(
            model,
            tok,
            max_batch_size=32,
            autocast_bf16=args.bf16,
            engine=EngineConfig(prefix_cache_bytes=cache_bytes),
        )
        start = time.perf_counter()
        per_turn = asyncio.run(_long_horizon(policy, E, T, obs, vocab))
        seconds = time.perf_counter() - start
        stats = policy.engine_stats() if isinstance(policy, HFPolicy) else None
        policy.close()
        new = sum(p["new"] for p in per_turn)
        out[name] = {
            "seconds": seconds,
            "prefill_tokens": stats.prefill_tokens,
            "new_prompt_tokens": new,
            "prefill_per_new": stats.prefill_tokens / new,
            "reused_tokens": stats.reused_tokens,
        }
        print(
            f"  {name:<9} {seconds:7.1f} s; prompt tokens run {stats.prefill_tokens} for {new} new "
            f"({stats.prefill_tokens / new:.2f}x), reused {stats.reused_tokens}"
        )
    r, n = out["reuse"], out["no reuse"]
    print(f"  prefill per new prompt token (reuse)  {r['prefill_per_new']:.2f}x   (goal <= 1.2)")
    print(f"  end to end, no reuse / reuse          {n['seconds'] / r['seconds']:.2f}x   (goal >= 4)")
    results["section2"] = out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=BUNDLED_MODEL)
    ap.add_argument("--sections", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="sample under bf16 autocast")
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--long-episodes", type=int, default=32)
    ap.add_argument("--long-turns", type=int, default=12)
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument(
        "--variants",
        nargs="+",
        choices=(
            "engine",
            "cascade",
            "no-cascade",
            "admit-1",
            "rows-64",
            "rows-64-cascade",
            "rows-128-cascade",
            "static",
            "module-step",
            "generate",
        ),
        default=["engine", "cascade", "static", "generate"],
        help="what section 1 runs",
    )
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model)
    print(f"model {args.model}, {args.threads} threads, torch {torch.__version__}, bf16 autocast {args.bf16}")
    results: dict[str, Any] = {}
    for s in args.sections:
        {0: section0, 1: section1, 2: section2}[s](args, model, tok, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
