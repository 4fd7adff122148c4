import threading
import time

from skyrl_agent.models import bundled_model_dir, tiny_random_model


def test_bundled_model_cache_waits_for_a_concurrent_conversion(tmp_path, monkeypatch):
    """A second process finds the lock of a conversion in progress and waits for the finished
    directory (renamed into place) instead of converting again."""
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path))
    models = tmp_path / "models"
    models.mkdir()
    lock = models / ".SmolLM2-135M-Instruct.lock"
    lock.touch()
    target = models / "SmolLM2-135M-Instruct"

    def finish_conversion():
        time.sleep(0.6)
        tmp = models / ".partial"
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
        tmp.rename(target)
        lock.unlink()

    t = threading.Thread(target=finish_conversion)
    t.start()
    start = time.monotonic()
    assert bundled_model_dir(timeout_s=30) == target
    assert time.monotonic() - start >= 0.5
    t.join()


def test_tiny_random_model_is_seeded(tokenizer):
    import torch

    a, _ = tiny_random_model(tokenizer, seed=3)
    b, _ = tiny_random_model(tokenizer, seed=3)
    assert all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    assert a.config.vocab_size == len(tokenizer) and sum(p.numel() for p in a.parameters()) < 10_000_000


def test_cache_keyword_of_a_peft_model_is_its_base_models():
    import peft

    from skyrl_agent.models import cache_kwarg

    model, _ = tiny_random_model()
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules="all-linear"))
    assert cache_kwarg(wrapped) == cache_kwarg(wrapped.get_base_model())


def test_loaded_models_run_transformers_own_layers(tmp_path, tokenizer):
    """transformers 5.2x swaps layers for the Hub's kernels by default (on CUDA that failed
    offline at the trainer's first ``model.train()``, seen on an H200); our loader turns that off,
    and ``train()`` does not turn it back on."""
    import transformers

    from skyrl_agent.models import load_model_and_tokenizer, pretrained_kwargs

    model, _ = tiny_random_model(tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, _ = load_model_and_tokenizer(tmp_path)
    if not hasattr(transformers.PreTrainedModel, "set_use_kernels"):
        assert pretrained_kwargs(transformers) == {}
        return
    assert loaded.use_kernels is False
    loaded.train()
    assert loaded.use_kernels is False
