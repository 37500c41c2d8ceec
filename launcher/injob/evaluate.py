"""Evaluate a Hugging Face model on SFT validation samples (the eval job's step).

Run by the eval job (templates/eval.sbatch.j2) on the verl runtime's Python, which may
not have sf installed: the job runs this file by path (runpy), so it imports only the
standard library at module level (torch, transformers and pandas when called).

For every validation sample (the run's own SFT data: a messages list whose last
assistant turn is the reference, or prompt/response columns) it computes the
reference's token NLL (what verl's val/loss is) and a greedy generation, and writes
samples.jsonl and summary.json into --out.

    python evaluate.py --model DIR --data FILE --out DIR [--max-samples N] [--max-new-tokens N]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read_rows(path: str) -> list[dict]:
    """Rows of a parquet, jsonl or json file (a list of objects)."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pandas  # the verl runtime has it (verl requires pandas and pyarrow)

        return pandas.read_parquet(p).to_dict(orient="records")
    text = p.read_text()
    if p.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data if isinstance(data, list) else data.get("data", [])


def _plain(value):
    """numpy arrays / scalars from parquet -> plain Python."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def split_sample(row: dict, messages_key: str, prompt_key: str, response_key: str):
    """-> (prompt messages, reference text). verl's SFT data is a messages list (the
    reference is the last assistant turn) or a prompt/response pair."""
    row = _plain(row)
    messages = row.get(messages_key)
    if isinstance(messages, list) and messages:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
        if last is None:
            raise ValueError(f"sample has no assistant turn in {messages_key!r}")
        return messages[:last], str(messages[last].get("content", ""))
    if prompt_key in row and response_key in row:
        prompt = row[prompt_key]
        if isinstance(prompt, list):
            return prompt, str(row[response_key])
        return [{"role": "user", "content": str(prompt)}], str(row[response_key])
    raise ValueError(f"sample has neither {messages_key!r} nor {prompt_key!r}/{response_key!r}: keys {sorted(row)}")


def _prompt_ids(tokenizer, messages) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    text = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages) + "\nassistant: "
    return tokenizer(text, add_special_tokens=True)["input_ids"]


def evaluate(model_dir: str, data: str, out_dir: str, *, messages_key="messages", prompt_key="prompt",
             response_key="response", max_samples=64, max_new_tokens=128) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32 if device == "cpu" else "auto")
    model.to(device).eval()
    rows = read_rows(data)[: max_samples if max_samples and max_samples > 0 else None]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total_nll, total_tokens, exact = 0.0, 0, 0
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with open(out / "samples.jsonl", "w", encoding="utf-8") as handle:
        for index, row in enumerate(rows):
            prompt, reference = split_sample(row, messages_key, prompt_key, response_key)
            prompt_ids = _prompt_ids(tokenizer, prompt)
            ref_ids = tokenizer(reference, add_special_tokens=False)["input_ids"]
            if tokenizer.eos_token_id is not None:
                ref_ids = ref_ids + [tokenizer.eos_token_id]
            ids = torch.tensor([prompt_ids + ref_ids], device=device)
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt_ids) - 1: -1].float()
                nll = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt_ids):], reduction="sum").item()
                generated = model.generate(
                    torch.tensor([prompt_ids], device=device), max_new_tokens=max_new_tokens, do_sample=False,
                    pad_token_id=pad_id,
                )[0, len(prompt_ids):]
            text = tokenizer.decode(generated, skip_special_tokens=True)
            match = text.strip() == reference.strip()
            exact += match
            total_nll += nll
            total_tokens += len(ref_ids)
            handle.write(json.dumps({
                "index": index, "prompt": prompt, "reference": reference, "generated": text,
                "nll": nll, "tokens": len(ref_ids), "loss": nll / max(len(ref_ids), 1), "exact_match": match,
            }, ensure_ascii=False) + "\n")
    summary = {
        "model": model_dir, "data": data, "samples": len(rows), "device": device,
        "val_loss": total_nll / max(total_tokens, 1), "exact_match": exact / max(len(rows), 1),
        "max_new_tokens": max_new_tokens, "samples_file": str(out / "samples.jsonl"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="evaluate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--messages-key", default="messages")
    parser.add_argument("--prompt-key", default="prompt")
    parser.add_argument("--response-key", default="response")
    parser.add_argument("--max-samples", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    summary = evaluate(args.model, args.data, args.out, messages_key=args.messages_key,
                       prompt_key=args.prompt_key, response_key=args.response_key,
                       max_samples=args.max_samples, max_new_tokens=args.max_new_tokens)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
