"""Parity on NCCL, one GPU per rank: every bug caught and fixed with the real SyncBatchNorm (CPU
runs use GlobalBatchNorm1d), FSDP2 vs DDP with bf16 mixed precision, and memory per rank with the
CUDA allocator's figure beside the local tensors'. Skipped without CUDA; on a GPU machine:

    pytest -m gpu tests/parity --durations=0       (or scripts/gpu_parity.sh OUT)
"""

import pytest

from dtlab.parity import BUGS, compare_many, verdict
from dtlab.parity.ddp import knobs
from dtlab.parity.fsdp import SETTINGS, fsdp_vs_ddp

from conftest import needs_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_orphans")]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_bug_on_nccl(dtype):
    needs_gpus()
    assert knobs("batchnorm", True, cuda=True)["norm"] == "sync"
    runs = [("none", False)] + [(b, f) for b in BUGS[1:] for f in (False, True)]
    reps = {(r.bug, r.fixed): r for r in compare_many(runs, nprocs=2, backend="nccl",
                                                     dtype=dtype, timeout=240)}
    assert reps[("none", False)].parity and reps[("none", False)].backend == "nccl"
    for bug in BUGS[1:]:
        ok, why = verdict(bug, reps[(bug, False)], reps[(bug, True)])
        assert ok, why


def test_fsdp2_vs_ddp_on_nccl():
    needs_gpus()
    for r in fsdp_vs_ddp(nprocs=2, backend="nccl", steps=4, timeout=240):
        assert r.parity, str(r)
        assert r.tolerance == {"float32": 1e-5, "bfloat16": 1e-2}[SETTINGS[r.bug][1]]
        for held in r.memory["measured"]:   # padded storage: equal on both ranks
            assert held["storage"]["params"] == r.memory["measured"][0]["params"]
            assert held["cuda_allocated"] >= held["storage"]["params"] + held["optimizer"]
