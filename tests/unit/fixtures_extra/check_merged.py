"""Load a merged model with transformers and compare it with the reference weights.

    python check_merged.py TARGET_DIR REFERENCE.pt

verl's FSDP merger casts every tensor to bfloat16 (fsdp_model_merger.py
`_load_and_merge_state_dicts`), so the comparison is in bfloat16.
"""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

target, reference = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(target, torch_dtype=torch.bfloat16)
tokenizer = AutoTokenizer.from_pretrained(target)
ref = torch.load(reference, map_location="cpu")
got = model.state_dict()
assert set(ref) == set(got), (sorted(set(ref) ^ set(got)))
for key, value in ref.items():
    assert torch.equal(got[key], value.bfloat16()), key
ids = tokenizer("user : what is one plus two ?", return_tensors="pt")["input_ids"]
out = model.generate(ids, max_new_tokens=3, do_sample=False)
assert out.shape[1] == ids.shape[1] + 3 or int(out[0, -1]) == tokenizer.eos_token_id
print(f"ok {len(ref)} tensors {type(model).__name__}")
