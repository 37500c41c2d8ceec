"""Make a tiny verl FSDP checkpoint from a random Qwen2-style model (run with a Python
that has torch + transformers: the export test venv, not sf's).

    python make_checkpoint.py OUT_DIR [STEP]

Writes the layout verl's FSDPModelMerger reads (verl/model_merger/fsdp_model_merger.py):

    OUT_DIR/latest_checkpointed_iteration.txt         "STEP"
    OUT_DIR/global_step_STEP/actor/fsdp_config.json   {"FSDP_version": 2, "world_size": 1}
    OUT_DIR/global_step_STEP/actor/model_world_size_1_rank_0.pt   the state dict
    OUT_DIR/global_step_STEP/actor/huggingface/       config, generation config, tokenizer
    OUT_DIR/reference.pt                               the same weights, for comparison

world_size 1 with plain (non-DTensor) tensors is what FSDPModelMerger handles as mesh
("fsdp",) of 1 (`_extract_device_mesh_info`, `merge_non_dtensor_shards`).
"""
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

out = Path(sys.argv[1])
step = int(sys.argv[2]) if len(sys.argv) > 2 else 1
actor = out / f"global_step_{step}" / "actor"
hf = actor / "huggingface"
hf.mkdir(parents=True, exist_ok=True)

words = ["<pad>", "<eos>", "<unk>", "user", "assistant", ":", "what", "is", "one", "plus", "two",
         "three", "four", "answer", "the", "?", "\n"]
vocab = {w: i for i, w in enumerate(words)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
fast.save_pretrained(hf)

torch.manual_seed(0)
config = Qwen2Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=1)
config.architectures = ["Qwen2ForCausalLM"]
model = Qwen2ForCausalLM(config)
config.save_pretrained(hf)
GenerationConfig(eos_token_id=1, pad_token_id=0, max_new_tokens=8).save_pretrained(hf)

state = {k: v.detach().clone() for k, v in model.state_dict().items()}
torch.save(state, actor / "model_world_size_1_rank_0.pt")
(actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
torch.save(state, out / "reference.pt")
(out / "latest_checkpointed_iteration.txt").write_text(str(step))
print(actor)
