"""LoopThreadPool: the engine's env-call pool (results, errors, deadlines, width, closing) and
the renderer's cache of short observation texts."""

import asyncio
import threading
import time

import pytest

from skyrl_agent._thread_pool import LoopThreadPool, run_in


def test_results_errors_and_threads():
    async def main():
        pool = LoopThreadPool(asyncio.get_running_loop(), 4, "t")
        main_thread = threading.get_ident()
        try:
            results = await asyncio.gather(
                *(pool.submit(lambda i=i: (i * i, threading.get_ident())) for i in range(200))
            )
            assert [r for r, _ in results] == [i * i for i in range(200)]
            assert main_thread not in {t for _, t in results} and len(pool._threads) <= 4
            with pytest.raises(KeyError, match="nope"):
                await pool.submit(dict().__getitem__, "nope")
            assert await run_in(None, sum, [1, 2]) == 3  # the loop's default executor
            assert all(t.daemon for t in pool._threads)  # a stuck env call never blocks exit
        finally:
            pool.close()

    asyncio.run(main())


def test_a_slow_call_does_not_block_the_others_and_deadlines_abandon_it():
    release = threading.Event()

    async def main():
        pool = LoopThreadPool(asyncio.get_running_loop(), 2)
        try:
            slow = pool.submit(release.wait, 10)
            t0 = time.monotonic()
            assert await asyncio.wait_for(pool.submit(lambda: "fast"), 5) == "fast"
            assert time.monotonic() - t0 < 2
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await slow  # the deadline cancels the waiting; the thread runs on
            assert slow.cancelled()
            release.set()
            assert await pool.submit(lambda: 7) == 7  # the pool still works; the late result was dropped
        finally:
            pool.close()

    asyncio.run(main())


def test_close_drops_queued_calls_and_refuses_new_ones():
    gate = threading.Event()

    async def main():
        pool = LoopThreadPool(asyncio.get_running_loop(), 1)
        busy = pool.submit(gate.wait, 10)
        queued = pool.submit(lambda: "never")
        pool.close()
        pool.close()  # idempotent
        assert queued.cancelled()
        with pytest.raises(RuntimeError, match="closed"):
            pool.submit(lambda: 1)
        gate.set()
        assert await busy is True

    asyncio.run(main())


def test_renderer_caches_short_texts_without_aliasing(tokenizer):
    from skyrl_agent.chat import ChatRenderer

    r = ChatRenderer(tokenizer)
    text = "error: no <|im_end|> here"
    first = r.encode_text(text)
    first.append(-1)  # a caller changing its list must not change the cache
    again = r.encode_text(text)
    assert again == first[:-1] and tokenizer.convert_tokens_to_ids("<|im_end|>") not in again
    long = "x" * 1000
    assert r.encode_text(long) == tokenizer.encode(long, add_special_tokens=False) and long not in r._text_ids


def test_per_call_deadlines_share_one_timer():
    release = threading.Event()

    async def main():
        pool = LoopThreadPool(asyncio.get_running_loop(), 4)
        try:
            t0 = time.monotonic()
            late = pool.submit(release.wait, 10, timeout=0.3)
            early = pool.submit(release.wait, 10, timeout=0.05)  # an earlier deadline re-arms the timer
            with pytest.raises(TimeoutError):
                await early
            assert time.monotonic() - t0 < 0.25 and not late.done()
            with pytest.raises(TimeoutError):
                await late
            assert await pool.submit(lambda: "in time", timeout=5) == "in time"
            assert pool._timer is not None  # armed for the finished call's deadline...
            release.set()
        finally:
            pool.close()
        assert pool._timer is None  # ...and disarmed by close

    asyncio.run(main())


def test_engine_step_deadline_through_the_pool(tokenizer):
    import skyrl_gym
    from skyrl_agent.engine import PromptItem, RolloutEngine
    from skyrl_agent.policies.fake import ScriptedPolicy
    from skyrl_agent.types import RolloutConfig

    skyrl_gym.register("test-pool-echo", "tests.agent.envs:EchoEnv")
    try:
        items = [PromptItem("test-pool-echo", ({"role": "user", "content": "x"},), {}, {"sleep_s": 0.5}, "p")]
        cfg = RolloutConfig(max_turns=2, max_retries=0, env_step_timeout_s=0.1)
        [t] = (
            RolloutEngine(ScriptedPolicy(tokenizer, ["a"]), cfg, progress=False).run_sync(items).trajectories
        )
    finally:
        skyrl_gym.deregister("test-pool-echo")
    assert t.masked and "env.step (turn 0) took longer than 0.1s" in t.error
