"""A tiny RL prompt set in verl's RL parquet layout, from make_tiny.py's toy tasks.

    python3 rl_data.py OUT_DIR [--train N] [--val N]

Each row: `prompt` (chat messages), `reward_model.ground_truth`, `data_source`, `ability`,
`extra_info` — what verl 0.9.1's RLHFDataset and reward loop read.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny import turn  # noqa: E402


def rows(split: str, count: int, rng: random.Random) -> list[dict]:
    out = []
    for index in range(count):
        question, answer = turn(rng)
        out.append({"data_source": "sf_tiny", "prompt": [{"role": "user", "content": question}],
                    "ability": "toy", "reward_model": {"style": "rule", "ground_truth": answer},
                    "extra_info": {"split": split, "index": index}})
    return out


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=256)
    ap.add_argument("--val", type=int, default=16)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(1)
    for split, count in (("train", args.train), ("val", args.val)):
        pd.DataFrame(rows(split, count, rng)).to_parquet(os.path.join(args.out, f"{split}.parquet"))
    print(f"rl data: {args.train} train / {args.val} val prompts in {args.out}")


if __name__ == "__main__":
    main()
