"""The output head's log-softmax and vocabulary moments on a 512-row chunk at once against
cache-sized row blocks (CPU, SmolLM2-135M-Instruct's 49,152-wide head).

Run (from the project root; the argument is the number of threads):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_logit_blocks.py 2

Each line: the seconds of three runs over 512 random hidden states at Min-K%'s 'medium'
precision, and whether every log-prob, mean and variance equals the 512-row pass's to the
bit. "head" is the head's matmul alone; "cur" the pass over the whole chunk (the code
before issue 47's fix); "subN" the same steps on N-row blocks (TransformersBackend uses
CACHE_BLOCK_BYTES, 8 rows at this vocabulary).
"""

import sys
import time

sys.path.insert(0, "benchmarks")
import torch
from llm_workload import SMOLLM2_GGUF, smollm2_dir

from lookahead.backends.transformers_backend import TransformersBackend

torch.set_num_threads(int(sys.argv[1]))
b = TransformersBackend("x", model_path=str(smollm2_dir()), gguf_file=SMOLLM2_GGUF, torch_threads=int(sys.argv[1]), batch_size=8)
head = b.model.get_output_embeddings()
torch.manual_seed(0)
h = torch.randn(512, 576) * 0.5
t = torch.randint(0, 49152, (512,))


def cur(h, t):
    logits = head(h).float()
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(1, t[:, None]).squeeze(1) - lse
    mu, var = b._moments(logits.sub_(lse[:, None]))
    return lp, mu, var


def sub(h, t, s):
    logits = head(h).float()
    n = logits.shape[0]
    lp = torch.empty(n)
    mu = torch.empty(n)
    var = torch.empty(n)
    for a in range(0, n, s):
        blk = logits[a : a + s]
        lse = torch.logsumexp(blk, dim=-1)
        lp[a : a + s] = blk.gather(1, t[a : a + s, None]).squeeze(1) - lse
        mu[a : a + s], var[a : a + s] = b._moments(blk.sub_(lse[:, None]))
    return lp, mu, var


def headonly(h, t):
    return head(h).float()


torch.set_float32_matmul_precision("medium")
with torch.inference_mode():
    ref = cur(h, t)
    for name, f in [("head", headonly), ("cur", cur)] + [
        (f"sub{s}", (lambda s: lambda h, t: sub(h, t, s))(s)) for s in (4, 8, 16, 32, 64)
    ]:
        ts = []
        for _ in range(3):
            x = time.perf_counter()
            r = f(h, t)
            ts.append(time.perf_counter() - x)
        same = name == "head" or all(torch.equal(a, c) for a, c in zip(r, ref, strict=False))
        print(name, [round(v, 3) for v in ts], same, flush=True)
