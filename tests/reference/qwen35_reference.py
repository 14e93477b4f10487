#!/usr/bin/env python3
"""Reference outputs from stock transformers (the torch fallback path, fp32, TF32 off).

    qwen35_reference.py random-model DIR      write a small random Qwen3_5ForCausalLM to DIR
    qwen35_reference.py logits DIR IDS...     print JSON {prefill, decode} logits for the token ids
    qwen35_reference.py compare-text BASE SPLICED   text-mode logits of a spliced checkpoint vs its base
    qwen35_reference.py compare-generate DIR PREFIX  `inband generate --logits PREFIX` vs transformers on DIR
    qwen35_reference.py compare-runs PREFIX PREFIX   two `inband generate --logits` runs against each other

Used by the exactness suites where torch and transformers are installed (a development
venv, or the GPU machine); nothing here runs in CI.
"""
import json
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def random_model(out_dir):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, vocab_size=120, tie_word_embeddings=True, max_position_embeddings=4096,
    )
    model = Qwen3_5ForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "linear_attn.norm" in name else 0.0))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)


def logits(model_dir, ids):
    from transformers import AutoModelForCausalLM, DynamicCache

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").to(device)
    model.eval()
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        prefill = model(x).logits[0].float().cpu().tolist()
        cache = DynamicCache(config=model.config)
        decode = []
        for i in range(len(ids)):
            out = model(x[:, i : i + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            decode.append(out.logits[0, 0].float().cpu().tolist())
    json.dump({"prefill": prefill, "decode": decode}, sys.stdout)


def compare_text_logits(base_dir, spliced_dir, prompts=8, length=12, seed=0):
    """Loads base and spliced checkpoints with stock transformers (fp32, eager) and compares
    their logits over the base vocabulary on random prompts. Prints JSON."""
    from transformers import AutoModelForImageTextToText

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {}
    models = {}
    for name, d in (("base", base_dir), ("spliced", spliced_dir)):
        models[name] = AutoModelForImageTextToText.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").to(device).eval()
    vocab = models["base"].config.text_config.vocab_size
    g = torch.Generator().manual_seed(seed)
    max_diff, same_greedy = 0.0, True
    for _ in range(prompts):
        ids = torch.randint(0, min(vocab, 1000), (1, length), generator=g).to(device)
        with torch.no_grad():
            a = models["base"](input_ids=ids).logits[0].float()
            b = models["spliced"](input_ids=ids).logits[0, :, :vocab].float()
        max_diff = max(max_diff, (a - b).abs().max().item())
        same_greedy &= bool((a.argmax(-1) == b.argmax(-1)).all())
    results = {"max_abs_diff": max_diff, "same_greedy": same_greedy, "prompts": prompts, "length": length, "device": device}
    json.dump(results, sys.stdout)
    print()


def compare_generate(model_dir, prefix):
    """Stock transformers' logits on the ids `inband generate` produced (one prefill over
    all of them) against inband's rows. Prints JSON."""
    import numpy as np
    from transformers import AutoModelForImageTextToText

    meta = json.load(open(prefix + ".json"))
    ours = torch.from_numpy(np.fromfile(prefix + ".f32", dtype="<f4").reshape(meta["rows"], meta["vocab"]))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model = model.to(device).eval()
    ids = torch.tensor([meta["ids"]], device=device)
    with torch.no_grad():
        theirs = model(input_ids=ids).logits[0, : meta["rows"], : meta["vocab"]].float().cpu()
    diff = (theirs - ours).abs().max().item()
    same = bool((theirs.argmax(-1) == ours.argmax(-1)).all())
    # The continuation was chosen greedily by inband; transformers agreeing on every
    # generated token means it would have generated the same text.
    print(json.dumps({"positions": meta["rows"], "max_abs_diff": diff, "same_greedy": same,
                      "largest_logit": theirs.abs().max().item(), "device": device}))


def compare_runs(a, b):
    """Two `inband generate --logits` runs (e.g. Qwen's layers on the CPU and on CUDA):
    the same ids, and how far their logits are apart. Prints JSON."""
    import numpy as np

    metas = [json.load(open(p + ".json")) for p in (a, b)]
    rows = [np.fromfile(p + ".f32", dtype="<f4").reshape(m["rows"], m["vocab"]) for p, m in zip((a, b), metas)]
    same_shape = rows[0].shape == rows[1].shape
    print(json.dumps({"same_ids": metas[0]["ids"] == metas[1]["ids"], "same_shape": same_shape,
                      "max_abs_diff": float(np.abs(rows[0] - rows[1]).max()) if same_shape else None,
                      "largest_logit": float(np.abs(rows[0]).max())}))


if __name__ == "__main__":
    if sys.argv[1] == "random-model":
        random_model(sys.argv[2])
    elif sys.argv[1] == "compare-text":
        compare_text_logits(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "compare-generate":
        compare_generate(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "compare-runs":
        compare_runs(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "logits":
        logits(sys.argv[2], [int(i) for i in sys.argv[3:]])
    else:
        sys.exit(__doc__)

