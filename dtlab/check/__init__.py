"""``dtlab check``: is this machine ready for distributed training? One table, each verdict held
to this machine's own hardware and to recorded healthy machines.

``dtlab doctor`` asks whether the course can run here; ``dtlab check`` asks whether the machine
is healthy, the way an engineer does on a new node before spending hours on it -- and, unlike
NVIDIA's ``dcgmi diag`` (which stops at the GPU) or nccl-tests (numbers without a verdict), it
goes up to torch.distributed: the collectives' answers, the bandwidth against the links' ceiling,
and whether a failure is caught and diagnosed. Each row says what was measured, what was
expected, where that expectation comes from, and what to do (the course section that explains
it)::

    $ dtlab check                 # quick: the table
    $ dtlab check --level standard  # and the P2P matrix, small-message latency, DDP parity
    $ dtlab check --level full    # and GPU-NUMA-NIC affinity, the ring's slowest hop
    $ dtlab check --json          # the same rows, for scripts
    $ dtlab check --nprocs 4      # ranks (default: the GPUs, else 2 on the CPU)

Verdicts: PASS, WARN (works, but not as it should: say why), FAIL (broken), SKIP (cannot be
checked here: say why). Exit status 0 when nothing is WARN or FAIL, 1 otherwise, 2 for bad
arguments. Checks of the quick level (:mod:`.checks`), in order:

1. ``software``    -- torch, CUDA, NCCL, driver versions; every NCCL/torch-distributed variable
                      set in the environment and what it does (multicast ones reported, never
                      changed); a variable that slows or weakens NCCL on purpose is a WARN;
2. ``gpus``        -- through NVML (``nvidia-ml-py``): PCIe link generation and width against
                      their maximum, uncorrected ECC errors, pending retired pages, throttle
                      reasons; SKIP where there is no NVML or no GPU;
3. ``collectives`` -- :func:`dtlab.collectives.validate_all` on every op, dtype and size; a
                      failure that is a known torch bug (:data:`dtlab.collectives.report.KNOWN_BUGS`) is named
                      with its upstream issue and is no fault of this machine (PASS);
4. ``bandwidth``   -- on GPUs, a 1 GiB all_reduce's busbw against the ceiling of the links
                      between them (NVLink: data rate x links, per direction) and the fraction
                      healthy recorded machines reach (:data:`.checks.HEALTHY_FRACTION`); SKIP on
                      the CPU, where gloo has no link ceiling to be held to;
5. ``failure``     -- the failure path works: a deliberate size mismatch on every rank is caught
                      within its bound, diagnosed as such, and leaves no process behind.

The standard level adds:

6. ``p2p``         -- every ordered GPU pair's copy rate (:func:`dtlab.bench.p2p_matrix`): a pair
                      without peer access or below 0.75 of the median pair is a FAIL naming it;
                      the slowest pair against the links' ceiling as for ``bandwidth``;
7. ``latency``     -- a CUDA-graph all_reduce of 8 B-1 KiB against the floor recorded on a
                      healthy NVLink pair (WARN above twice it; no floor for other links: SKIP);
8. ``parity``      -- DDP on the ranks against one process, 8 steps in float64
                      (:func:`dtlab.parity.compare`), within the float64 tolerance.

The full level adds (:mod:`.full`; on the CPU each SKIPs, saying why):

9. ``affinity``    -- from ``nvidia-smi topo -m``: each rank's CPUs (``os.sched_getaffinity``
                      in the ranks) against its GPU's NUMA node (CPU Affinity, else the node's
                      CPUs from /sys), GPUs matched to the matrix by PCI bus id; each GPU's
                      nearest NIC (PIX < PXB < PHB < NODE < SYS) among those ``NCCL_IB_HCA``
                      leaves. WARN for a rank on no CPU of its GPU's node, or a GPU whose NIC is
                      across the SMP interconnect (SYS) while a closer one exists; what the
                      matrix does not say is reported as unsure;
10. ``ring``       -- the ring NCCL would plausibly build (slowest hop fastest, as its search
                      prefers), its slowest hop, link and nominal ceiling
                      (:func:`dtlab.topology.predict_pairs`), against the bandwidth row's busbw:
                      WARN below 0.60 of it (not the topology's doing); above it, the note says
                      NCCL's other rings (channels) made the prediction unsure;
11. ``multinode``  -- a SKIP saying how to run the cross-node part: ``python -m dtlab.check``
                      under torchrun on every node is :mod:`dtlab.multinode.check` (every rank
                      present, no duplicate GPU, within- vs across-node all_reduce against the
                      NIC's line rate): ``dtlab multinode script --entry "-m dtlab.check"``;
                      rehearsed on one machine by ``dtlab multinode simulate``.

A check that could not run is a FAIL naming what NCCL or CUDA named (:mod:`.failures`): a
duplicate GPU -- two ranks on one device, NCCL's "Duplicate GPU detected" -- or a GPU hidden from
a rank ("invalid device ordinal"), both from ranks shown different ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

from .report import FAIL, PASS, SKIP, WARN, Report, Row
from .checks import LEVELS, run

__all__ = ["run", "Report", "Row", "PASS", "WARN", "FAIL", "SKIP", "LEVELS"]
