#!/usr/bin/env python3
"""The chip under stock transformers (fp32, the reference PyTorch path, TF32 off).

    chip_in_transformers.py export PACK OUT_DIR
        Write the chip layers of a chip pack (weightgen --out PACK) as a stand-alone
        Qwen3_5ForCausalLM checkpoint: every layer linear_attention, the residual as wide
        as in a spliced checkpoint (base dims present and zero, so every RMSNorm sees the
        same mean as in the spliced model), the chip vocabulary, the chip token embedding,
        and an lm_head whose row for each chip token is its kind one-hot plus its field
        one-hots: the logit is the score inband's engines maximise field by field. One
        inert full_attention layer (all weights zero: it adds exact zeros) ends the stack,
        because transformers' cache counts positions on attention layers only.
    chip_in_transformers.py step MODEL_DIR TRACE
        Feed the trace's inputs (`inband run --engine chip --boot prefill --trace TRACE`) one token per
        forward pass with the recurrent cache, take each pass's argmax, and compare it
        with the token inband's engine chose. Prints JSON.
    chip_in_transformers.py decode-speed SPLICED_DIR TRACE N
        Time stock transformers decoding the spliced checkpoint itself (all of Qwen's
        layers run too) on the trace's first N inputs, one token per pass. Prints JSON.

Runs where torch and transformers are installed (the GPU machine); not in CI.
"""
import json
import os
import sys
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def read_trace(path):
    with open(path) as f:
        return [tuple(int(x) for x in line.split()) for line in f if line.strip()]


def export(pack_dir, out_dir):
    from safetensors import safe_open
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    manifest = json.load(open(os.path.join(pack_dir, "manifest.json")))
    base = manifest["base"]
    h, c, layers = base["hidden_size"], manifest["chip_dims"], manifest["chip_layers"]
    width = h + c
    config = Qwen3_5TextConfig(
        vocab_size=manifest["chip_vocab"],
        hidden_size=width,
        intermediate_size=base["intermediate_size"],
        num_hidden_layers=layers + 1,
        layer_types=["linear_attention"] * layers + ["full_attention"],
        linear_num_key_heads=base["linear_num_key_heads"],
        linear_num_value_heads=base["linear_num_value_heads"],
        linear_key_head_dim=base["linear_key_head_dim"],
        linear_value_head_dim=base["linear_value_head_dim"],
        linear_conv_kernel_dim=base["linear_conv_kernel_dim"],
        rms_norm_eps=base["rms_norm_eps"],
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=256,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    state = {}
    with safe_open(os.path.join(pack_dir, "chip.safetensors"), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name).float()
            if name == "embed_tokens":
                full = torch.zeros(t.shape[0], width)
                full[:, h:] = t
                state["model.embed_tokens.weight"] = full
            elif name == "final_norm":
                full = torch.zeros(width)
                full[h:] = t
                state["model.norm.weight"] = full
            else:
                rel = name.split(".", 2)[2]
                key = "model." + name
                if rel in ("input_layernorm.weight", "post_attention_layernorm.weight"):
                    full = torch.zeros(width)
                    full[h:] = t
                elif rel in ("linear_attn.out_proj.weight", "mlp.down_proj.weight"):
                    full = torch.zeros(width, t.shape[1])
                    full[h:] = t
                elif rel.startswith("linear_attn.in_proj_") or rel in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                    full = torch.zeros(t.shape[0], width)
                    full[:, h:] = t
                else:
                    full = t
                state[key] = full
    # lm_head: kind one-hot + field one-hots, ids in the chip vocabulary's mixed radix.
    tokens = manifest["tokens"]
    sizes = [f["size"] for f in tokens["fields"]]
    kind_dims, field_dims = manifest["kind_dims"], manifest["field_dims"]
    head = torch.zeros(manifest["chip_vocab"], width)
    offset = 0
    for k, kind in enumerate(tokens["kinds"]):
        fields = kind["fields"]
        count = 1
        for f in fields:
            count *= sizes[f]
        ids = torch.arange(count)
        rows = offset + ids
        head[rows, h + kind_dims[k]] = 1.0
        rest = ids.clone()
        for f in reversed(fields):
            v = rest % sizes[f]
            rest //= sizes[f]
            dims = torch.tensor(field_dims[f])[v]
            head[rows, h + dims] = 1.0
        offset += count
    assert offset == manifest["chip_vocab"]
    state["lm_head.weight"] = head
    # The inert last layer: every weight zero, so it adds exact zeros to the residual.
    for k, p in model.named_parameters():
        if k.startswith(f"model.layers.{layers}."):
            state[k] = torch.zeros(p.shape)
    missing = set(k for k, _ in model.named_parameters()) - set(state)
    if missing:
        sys.exit(f"export: no tensor for {sorted(missing)[:5]}")
    model.load_state_dict(state, assign=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    print(json.dumps({"exported": out_dir, "hidden_size": width, "chip_layers": layers, "vocab": manifest["chip_vocab"]}))


def step(model_dir, trace_path):
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    trace = read_trace(trace_path)
    chosen = torch.empty(len(trace), dtype=torch.long, device=device)
    cache = None
    start = time.time()
    with torch.no_grad():
        for i, (inp, _) in enumerate(trace):
            out = model(input_ids=torch.tensor([[inp]], device=device), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            chosen[i] = out.logits[0, -1].argmax()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - start
    got = chosen.cpu().tolist()
    want = [w for _, w in trace]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    print(json.dumps({
        "passes": len(trace), "mismatches": len(bad), "first_mismatch": bad[0] if bad else None,
        "first_mismatch_tokens": [got[bad[0]], want[bad[0]]] if bad else None,
        "seconds": round(seconds, 2), "passes_per_s": round(len(trace) / seconds, 1), "device": device,
        "architecture": type(model).__name__,
    }))


def decode_speed(spliced_dir, trace_path, n):
    from transformers import AutoModelForImageTextToText

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForImageTextToText.from_pretrained(spliced_dir, dtype=torch.float32).to(device).eval()
    offset = model.config.inband["chip_token_offset"] if hasattr(model.config, "inband") else None
    if offset is None:
        offset = json.load(open(os.path.join(spliced_dir, "config.json")))["inband"]["chip_token_offset"]
    trace = read_trace(trace_path)[:n]
    cache = None
    times = []
    with torch.no_grad():
        for i, (inp, _) in enumerate(trace):
            if i == 10:
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.time()
            out = model(input_ids=torch.tensor([[offset + inp]], device=device), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            out.logits[0, -1].argmax()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - start
    print(json.dumps({"steps": len(trace) - 10, "seconds": round(seconds, 2),
                      "steps_per_s": round((len(trace) - 10) / seconds, 1), "device": device,
                      "layers": model.config.text_config.num_hidden_layers}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "step":
        step(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "decode-speed":
        decode_speed(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
