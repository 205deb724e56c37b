"""dtlab's capstone Llama vs Hugging Face transformers' ``LlamaForCausalLM`` of the same shape,
same FSDP2 settings, same batches, same training step, in one job, interleaved (issue 15, item 5).

Contract: one ``dtlab.run`` launch; every rank builds both models from the same seed (HF from a
``LlamaConfig``, random init, nothing downloaded), shards both with
:func:`dtlab.capstone.train.shard` (``fully_shard`` per decoder layer + root; on CUDA bf16 params
/ fp32 reduce), warms each up, then runs ``--rounds`` rounds; each round times ``--steps`` steps
of each model (:func:`dtlab.capstone.train.train_step`: fp32 cross-entropy on the logits,
backward, grad-norm clip 1.0, AdamW), alternating which model goes first. Per model: the median
over rounds of each round's median step time, tokens/s per GPU, MFU against a bf16 matmul rate
timed on the same GPU in the same job, and the peak memory of its own steps (the other model's
resident shards subtracted). Verdict: dtlab's step time <= 1.02 x HF's. Random token ids.

    PYTHONPATH=. python3 benchmarks/capstone_vs_hf.py --json out.json            # 1b, all GPUs
    PYTHONPATH=. python3 benchmarks/capstone_vs_hf.py --size tiny --backend gloo --steps 3   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from dtlab.capstone.mfu import percent  # noqa: E402
from dtlab.capstone.model import CONFIGS  # noqa: E402

GOAL = 1.02


def hf_model(cfg):
    """transformers' LlamaForCausalLM with our config's shape, randomly initialised."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaConfig(vocab_size=cfg.vocab, hidden_size=cfg.dim, intermediate_size=cfg.ffn,
                     num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                     num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.seq,
                     rms_norm_eps=cfg.eps, rope_theta=cfg.rope_theta, tie_word_embeddings=False,
                     attention_bias=False, mlp_bias=False, use_cache=False,
                     attn_implementation="sdpa")
    return LlamaForCausalLM(hf)


def _state_bytes(model, opt) -> int:
    """This rank's shards of the model's parameters and its optimizer state."""
    import torch

    def local(t):
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    return (sum(local(p) for p in model.parameters())
            + sum(local(v) for s in opt.state.values() for v in s.values()
                  if torch.is_tensor(v) and v.dim() > 0))


def rank_side(size: str, steps: int, warmup: int, rounds: int, batch, seq) -> dict:
    import dataclasses

    import torch
    import torch.distributed as dist

    from dtlab.capstone.data import random_batches
    from dtlab.capstone.mfu import mfu, of_matmul
    from dtlab.capstone.model import Llama, flops_per_token, n_params
    from dtlab.capstone.train import make_optimizer, matmul_flops, shard, train_step
    from dtlab.runtime.context import device

    rank, world, dev = dist.get_rank(), dist.get_world_size(), device()
    cuda = dev.type == "cuda"
    cfg = dataclasses.replace(CONFIGS[size], batch=batch or CONFIGS[size].batch,
                              seq=seq or CONFIGS[size].seq)
    peak = matmul_flops(dev)
    models = {}
    for name, build in (("dtlab", Llama), ("hf", hf_model)):
        torch.manual_seed(0)
        with torch.device(dev):
            m = build(cfg)
        shard(m, dev)
        models[name] = (m, make_optimizer(m, cfg.lr), sum(p.numel() for p in m.parameters()))
    data = random_batches(cfg.vocab, cfg.batch, cfg.seq, rank, world, seed=1, device=dev)
    batches = [next(data) for _ in range(4)]

    def run(name, n):
        model, opt, _ = models[name]
        times = []
        for i in range(n):
            x, y = batches[i % len(batches)]
            t0 = time.perf_counter()
            train_step(model, opt, x, y).item()      # .item(): the step has finished
            times.append(time.perf_counter() - t0)
        return times

    for name in models:
        run(name, warmup)
    rec = {name: {"round_median_s": [], "peak_bytes": 0} for name in models}
    for r in range(rounds):
        for name in (list(models) if r % 2 == 0 else list(models)[::-1]):
            if cuda:
                torch.cuda.synchronize(dev)
                other = torch.cuda.memory_allocated(dev) - _state_bytes(*models[name][:2])
                torch.cuda.reset_peak_memory_stats(dev)
            dist.barrier()
            rec[name]["round_median_s"].append(statistics.median(run(name, steps)))
            if cuda:
                rec[name]["peak_bytes"] = max(rec[name]["peak_bytes"],
                                              torch.cuda.max_memory_allocated(dev) - other)
    tokens = cfg.batch * cfg.seq
    gpu = torch.cuda.get_device_name(dev) if cuda else None
    fpt = flops_per_token(cfg)   # the same count for both: they hold the same parameters
    for name, d in rec.items():
        d["n_params"] = models[name][2]
        d["step_s"] = statistics.median(d["round_median_s"])
        d["tokens_per_s"] = tokens / d["step_s"]
        d["mfu"] = mfu(fpt, d["tokens_per_s"], gpu)
        d["of_matmul"] = of_matmul(fpt, d["tokens_per_s"], peak)
        d["peak_bytes"] = d["peak_bytes"] if cuda else None
    assert rec["dtlab"]["n_params"] == rec["hf"]["n_params"] == n_params(cfg), \
        (rec["dtlab"]["n_params"], rec["hf"]["n_params"])
    import transformers
    return {"rank": rank, "device": str(dev), "gpu": gpu, "matmul_flops": peak, "models": rec, "config": cfg.to_json(),
            "torch": torch.__version__, "transformers": transformers.__version__}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="1b", choices=list(CONFIGS))
    p.add_argument("--steps", type=int, default=10, help="timed steps per model per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median of them)")
    p.add_argument("--batch", type=int, default=None, help="sequences per GPU (default: size's)")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--nprocs", type=int, default=None, help="ranks (default: one per GPU)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--timeout", type=float, default=540)
    p.add_argument("--json", default=None, help="write every rank's numbers here")
    a = p.parse_args(argv)
    import dtlab

    res = dtlab.run(rank_side, a.size, a.steps, a.warmup, a.rounds, a.batch, a.seq,
                    nprocs=a.nprocs, backend=a.backend, timeout=a.timeout)
    ranks = res.values
    r0 = ranks[0]
    cfg = r0["config"]
    print(f"{a.size}: {r0['models']['dtlab']['n_params'] / 1e6:.1f}M params, {len(ranks)} ranks "
          f"({r0['gpu'] or r0['device']}), {cfg['batch']}x{cfg['seq']} tokens per rank, "
          f"torch {r0['torch']}, transformers {r0['transformers']}, median of {a.rounds} "
          f"interleaved rounds x {a.steps} steps")
    if r0["matmul_flops"]:
        print(f"bf16 matmul measured: {r0['matmul_flops'] / 1e12:.0f} TF/s (rank 0)")
    print(f"{'model':>6} {'rank':>4} {'ms/step':>8} {'tok/s/GPU':>10} {'MFU':>6} {'of matmul':>9} "
          f"{'peak GiB':>9}  rounds (ms)")
    for name in ("dtlab", "hf"):
        for r in ranks:
            d = r["models"][name]
            mfu, frac = percent(d.get("mfu")), percent(d.get("of_matmul"))
            mem = f"{d['peak_bytes'] / 2**30:.1f}" if d["peak_bytes"] is not None else "-"
            rounds = " ".join(f"{t * 1e3:.1f}" for t in d["round_median_s"])
            print(f"{name:>6} {r['rank']:>4} {d['step_s'] * 1e3:>8.1f} {d['tokens_per_s']:>10.0f} "
                  f"{mfu:>6} {frac:>9} {mem:>9}  {rounds}")
    ratio = max(r["models"]["dtlab"]["step_s"] / r["models"]["hf"]["step_s"] for r in ranks)
    verdict = "at least as fast" if ratio <= GOAL else "slower"
    print(f"dtlab / hf step time (worst rank): {ratio:.3f} -> {verdict} (goal <= {GOAL})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "ratio": ratio, "goal": GOAL, "ranks": ranks}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
