"""Graph-mode sendrecv on 2 GPUs: three ways for torch to post the send and the receive, and
all_reduce beside them, each captured 20 calls to a CUDA graph and replayed 100 times
(dtlab.bench.graph.time_graphed, as `dtlab bench --graph`), three rounds; prints the median
per size and whether each received buffer held the peer's data.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 scripts/gpu_sendrecv_variants.py

Recorded: data/h100x2-sendrecv-variants/ (the truth issue's 3b: is the sendrecv gap to
nccl-tests in how torch posts the operations? It is not).
"""
import sys
import torch
import torch.distributed as dist
import dtlab
from dtlab.bench.graph import time_graphed


class V:
    def __init__(self, how, nbytes, dev):
        self.how, self.dev = how, dev
        r, n = dist.get_rank(), dist.get_world_size()
        c = max(1, nbytes // 4)
        self.inp = torch.full((c,), float(r + 1), device=dev)
        self.out = torch.zeros(c, device=dev)
        self.nxt, self.prv = (r + 1) % n, (r - 1) % n

    def run(self):
        if self.how == "batch_wait_each":
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, self.inp, self.nxt),
                                             dist.P2POp(dist.irecv, self.out, self.prv)]):
                w.wait()
        elif self.how == "batch_wait_last":
            ws = dist.batch_isend_irecv([dist.P2POp(dist.isend, self.inp, self.nxt),
                                         dist.P2POp(dist.irecv, self.out, self.prv)])
            ws[-1].wait()
        elif self.how == "coalesce_sync":
            with dist._coalescing_manager(device=self.dev, async_ops=False):
                dist.isend(self.inp, self.nxt)
                dist.irecv(self.out, self.prv)
        elif self.how == "all_reduce":
            dist.all_reduce(self.inp)


def main(sizes, hows, rounds):
    dev = dtlab.device()
    out = []
    for rnd in range(rounds):
        for how in hows:
            for s in sizes:
                case = V(how, s, dev)
                t = time_graphed(case, 20, 5, dev, 100)
                ok = True
                if how != "all_reduce":
                    ok = bool((case.out == float(case.prv + 1)).all().item())
                t = torch.tensor([t], dtype=torch.float64, device=dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                out.append((rnd, how, s, t.item() * 1e6, ok))
    return out


if __name__ == "__main__":
    sizes = [8, 1024, 2048, 4096, 65536]
    hows = ["batch_wait_each", "batch_wait_last", "coalesce_sync", "all_reduce"]
    res = dtlab.run(main, sizes, hows, 3, nprocs=2, backend="nccl",
                    env={"NCCL_GRAPH_MIXING_SUPPORT": "0"}, timeout=300)
    import statistics as st
    rows = res.values[0]
    for how in hows:
        for s in sizes:
            ts = [t for _, h, z, t, _ in rows if h == how and z == s]
            oks = all(ok for _, h, z, _, ok in rows if h == how and z == s)
            print(f"{how:16s} {s:6d} B  median {st.median(ts):6.2f} us  all {['%.2f' % t for t in ts]}  correct={oks}")
