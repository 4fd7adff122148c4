"""Save a tiny randomly initialised model (SmolLM2 tokenizer) for smoke runs: seconds, not minutes.

    python examples/make_tiny_model.py runs/tiny-model
    skyrl train --model runs/tiny-model --steps 1 ...

Its text is gibberish; it checks that a pipeline runs end to end, not that anything is learned.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory to write (config, weights, tokenizer)")
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args(argv)

    from skyrl_agent.models import tiny_random_model

    model, tokenizer = tiny_random_model(hidden_size=args.hidden_size, num_layers=args.layers)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"tiny model in {args.out}")
    return args.out


if __name__ == "__main__":
    main()
