"""Load an exported Hugging Face folder with transformers, generate, and compare its loss
with the untrained model's on validation conversations.

    python3 export_check.py EXPORT_DIR --base MODEL_DIR --val VAL.parquet [--out check.json]
"""

from __future__ import annotations

import argparse
import json
import os

PROMPTS = ["what is 12 plus 7 ?", "reverse : cat dog bird", "spell the digit 4", "sort : red blue green"]


def _ids(enc):
    return enc["input_ids"] if hasattr(enc, "keys") else enc


def mean_loss(model, tok, rows, device) -> float:
    import torch

    total, n = 0.0, 0
    with torch.no_grad():
        for messages in rows:
            ids = torch.tensor([list(_ids(tok.apply_chat_template(messages, tokenize=True)))], device=device)
            total += model(input_ids=ids, labels=ids).loss.item()
            n += 1
    return total / max(n, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("export_dir")
    ap.add_argument("--base", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--out")
    ap.add_argument("--n", type=int, default=64)
    a = ap.parse_args()

    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    files = sorted(os.listdir(a.export_dir))
    tok_dir = a.export_dir if any(f.startswith("tokenizer") for f in files) else a.base
    tok = AutoTokenizer.from_pretrained(tok_dir)
    model = AutoModelForCausalLM.from_pretrained(a.export_dir, dtype=torch.float32).to(device).eval()
    base = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32).to(device).eval()

    rows = []
    for m in pd.read_parquet(a.val)["messages"].tolist()[: a.n]:
        rows.append([{"role": str(x["role"]), "content": str(x["content"])} for x in m])
    gens = []
    for p in PROMPTS:
        ids = torch.tensor([list(_ids(tok.apply_chat_template([{"role": "user", "content": p}],
                                                               add_generation_prompt=True, tokenize=True)))],
                           device=device)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=16,
                             do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        gens.append({"prompt": p, "completion": tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False)})
    result = {
        "export_dir": a.export_dir,
        "files": files,
        "tokenizer_from": tok_dir,
        "model_class": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "val_loss_exported": mean_loss(model, tok, rows, device),
        "val_loss_untrained": mean_loss(base, tok, rows, device),
        "val_conversations": len(rows),
        "generations": gens,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
