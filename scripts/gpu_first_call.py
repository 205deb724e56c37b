"""The first NCCL collective's cost with NCCL's lazy connection set-up (NCCL_RUNTIME_CONNECT=1,
the default since NCCL 2.22) and without it (=0: every connection made at communicator
creation), side by side, interleaved rounds: `dtlab.bench.timing_pitfalls`' "first call" rows
at 8 B on 2 GPUs (section 02's recorded figure, 0.16-0.20 s, is the default's).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 scripts/gpu_first_call.py [ROUNDS]

Prints one line per round and setting: the first call on each rank, in ms. Recorded:
data/h200x2-first-call/.
"""
import os
import sys

from dtlab import bench


def main(rounds: int) -> None:
    print("round,NCCL_RUNTIME_CONNECT,rank,first_call_ms,timed_call_us")
    for rnd in range(rounds):
        for rc in ("1", "0"):
            os.environ["NCCL_RUNTIME_CONNECT"] = rc
            df = bench.timing_pitfalls("all_reduce", 8, nprocs=2)
            first = df[df["method"] == "first call"]
            timed = df[df["method"].str.startswith("dtlab")]["time_us"]
            for _, row in first.iterrows():
                print(f"{rnd},{rc},{row['rank']},{row['time_us'] / 1e3:.1f},"
                      f"{timed.median():.1f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
