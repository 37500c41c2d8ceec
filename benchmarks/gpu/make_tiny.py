"""Make a tiny Qwen2-style model, a tokenizer with a chat template, and a chat dataset.

Everything is made on the spot, with no downloads: a byte-level BPE tokenizer trained (with
the `tokenizers` library) on the generated conversations, a Qwen2 config with random
weights, and train/validation parquet files in verl's multi-turn `messages` format.

    python3 make_tiny.py --out DIR [--train 9600] [--val 256] [--hidden 768 --layers 12]

writes DIR/model/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json) and DIR/data/{train,val}.parquet, and prints a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
ANIMALS = ["cat", "dog", "bird", "fish", "horse", "mouse", "lion", "tiger", "bear", "wolf", "fox", "owl"]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "pink", "brown"]


def turn(rng: random.Random) -> tuple[str, str]:
    """One (user, assistant) exchange of a few learnable kinds."""
    kind = rng.randrange(5)
    if kind == 0:
        a, b = rng.randrange(100), rng.randrange(100)
        return f"what is {a} plus {b} ?", f"{a} plus {b} is {a + b} ."
    if kind == 1:
        words = rng.sample(ANIMALS, rng.randint(3, 6))
        return "reverse : " + " ".join(words), " ".join(reversed(words))
    if kind == 2:
        n = rng.randrange(10)
        return f"spell the digit {n}", f"the digit {n} is spelled {NUMBER_WORDS[n]} ."
    if kind == 3:
        c, a = rng.choice(COLORS), rng.choice(ANIMALS)
        return f"describe a {c} {a}", f"a {c} {a} is an animal whose color is {c} ."
    words = rng.sample(COLORS, rng.randint(2, 5))
    return "sort : " + " ".join(words), " ".join(sorted(words))


def conversation(rng: random.Random) -> list[dict]:
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": "you are a tiny helpful model ."})
    for _ in range(1 if rng.random() < 0.7 else 2):
        user, assistant = turn(rng)
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages


def build_tokenizer(texts: list[str], vocab_size: int, out_dir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>"], model_max_length=2048)
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(out_dir)
    return hf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=9600)
    ap.add_argument("--val", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import pandas as pd
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    rng = random.Random(args.seed)
    train = [conversation(rng) for _ in range(args.train)]
    val = [conversation(rng) for _ in range(args.val)]
    model_dir = os.path.join(args.out, "model")
    data_dir = os.path.join(args.out, "data")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)

    corpus = [m["content"] for conv in train for m in conv] + ["system user assistant"]
    tok = build_tokenizer(corpus, args.vocab, model_dir)
    # The chat template must give the same ids turn by turn as for the whole conversation
    # (verl's MultiTurnSFTDataset checks exactly that).
    conv = train[0] + [{"role": "user", "content": "what is 1 plus 2 ?"},
                       {"role": "assistant", "content": "1 plus 2 is 3 ."}]
    whole = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=False)
    whole = whole["input_ids"] if isinstance(whole, dict) or hasattr(whole, "keys") else whole
    parts = []
    for m in conv:
        ids = tok.apply_chat_template([m], tokenize=True, add_generation_prompt=False)
        parts += ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(whole) == list(parts), "chat template is not turn-additive"

    vocab = ((len(tok) + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(model_dir)
    GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     max_new_tokens=32, do_sample=False).save_pretrained(model_dir)

    for name, rows in (("train", train), ("val", val)):
        pd.DataFrame({"messages": rows}).to_parquet(os.path.join(data_dir, f"{name}.parquet"))

    n_params = sum(p.numel() for p in model.parameters())
    lengths = [len(tok.apply_chat_template(c, tokenize=False)) for c in train[:200]]
    print(json.dumps({
        "model_dir": model_dir, "data_dir": data_dir, "params": n_params, "vocab_size": vocab,
        "tokenizer_len": len(tok), "hidden": args.hidden, "layers": args.layers,
        "train_rows": len(train), "val_rows": len(val),
        "mean_chars_per_conversation": sum(lengths) / len(lengths),
    }))


if __name__ == "__main__":
    main()
