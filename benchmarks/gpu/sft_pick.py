"""Which SFT checkpoint leaves GRPO room to learn (issue 34): the word-overlap reward of each
exported checkpoint on the RL prompts, sampled as verl's rollout samples (temperature 1.0, no
top-k/top-p, 32 new tokens) and greedy as verl's validation does.

    python3 sft_pick.py OUT.json --prompts train.parquet --reward reward_tiny.py \
        [--target 0.35] [--low 0.2] [--high 0.6] STEP=EXPORT_DIR [STEP=EXPORT_DIR ...]

Prints one line per checkpoint and the pick: the step whose sampled reward is nearest
--target among those inside [--low, --high] (else the nearest of all). Runs on the GPU
machine with the image's torch and transformers; the exports are `sf export` folders.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time


def load_reward(path: str):
    spec = importlib.util.spec_from_file_location("sf_kit_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


def pick(scores: dict[int, float], target: float, low: float, high: float) -> int:
    """Pure: the step whose score is nearest `target`, preferring scores inside [low, high]."""
    inside = {s: v for s, v in scores.items() if low <= v <= high}
    pool = inside or scores
    return min(pool, key=lambda s: (abs(pool[s] - target), s))


def evaluate(model_dir: str, prompts: list[list[dict]], truths: list[str], score, samples: int,
             max_new: int, seed: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
    out = {}
    for mode in ("sampled", "greedy"):
        torch.manual_seed(seed)
        kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=samples) \
            if mode == "sampled" else dict(do_sample=False)
        with torch.no_grad():
            gen = model.generate(**batch, max_new_tokens=max_new, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id, **kw)
        gen = gen[:, batch["input_ids"].shape[1]:]
        n = samples if mode == "sampled" else 1
        values, examples = [], []
        for i, ids in enumerate(gen):
            text = tok.decode(ids, skip_special_tokens=True)
            truth = truths[i // n]
            values.append(float(score("sf_tiny", text, truth)))
            if len(examples) < 4 and i % n == 0:
                examples.append({"prompt": prompts[i // n][-1]["content"], "completion": text, "truth": truth})
        out[mode] = {"mean": sum(values) / len(values), "n": len(values), "examples": examples}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("checkpoints", nargs="+", help="STEP=EXPORT_DIR")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--reward", required=True)
    ap.add_argument("--n-prompts", type=int, default=256)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--target", type=float, default=0.35)
    ap.add_argument("--low", type=float, default=0.2)
    ap.add_argument("--high", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import pandas as pd

    rows = pd.read_parquet(a.prompts).head(a.n_prompts)
    prompts = [list(p) for p in rows["prompt"]]
    prompts = [[{"role": m["role"], "content": m["content"]} for m in p] for p in prompts]
    truths = [r["ground_truth"] for r in rows["reward_model"]]
    score = load_reward(a.reward)
    result = {"target": a.target, "low": a.low, "high": a.high, "n_prompts": len(prompts), "samples": a.samples,
              "checkpoints": {}}
    for item in a.checkpoints:
        step, _, path = item.partition("=")
        t0 = time.time()
        try:
            entry = evaluate(path, prompts, truths, score, a.samples, a.max_new, a.seed)
        except Exception as exc:  # a failed export: say so, pick among the others
            entry = {"error": f"{exc.__class__.__name__}: {exc}"}
        entry["dir"], entry["seconds"] = path, round(time.time() - t0, 1)
        result["checkpoints"][int(step)] = entry
        print(f"sft step {step}: " + (f"sampled {entry['sampled']['mean']:.3f}, greedy {entry['greedy']['mean']:.3f}"
                                      if "error" not in entry else entry["error"]), flush=True)
    scores = {s: e["sampled"]["mean"] for s, e in result["checkpoints"].items() if "sampled" in e}
    result["pick"] = pick(scores, a.target, a.low, a.high) if scores else None
    with open(a.out, "w") as fp:
        json.dump(result, fp, indent=1)
    print(f"pick: step {result['pick']}")
    return 0 if scores else 1


if __name__ == "__main__":
    raise SystemExit(main())
