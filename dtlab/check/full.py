"""The full level of ``dtlab check``: the topology the ranks run on (section 03), and where the
cross-node part runs (section 04). The topology's two rows are each a verdict rule over a parsed
``nvidia-smi topo -m`` (:func:`dtlab.topology.parse_topo_matrix`), kept apart from reading this
machine so that tests hold them to recorded matrices:

* :func:`affinity_verdict` -- each rank's CPUs against its GPU's NUMA node (the matrix's ``CPU
  Affinity`` column, else the NUMA node's CPUs from ``/sys/devices/system/node``), and each
  GPU's nearest NIC among those NCCL may use (``NCCL_IB_HCA``) against the nearest of all;
* :func:`ring_verdict` -- the ring NCCL would plausibly build (:func:`ring_order`), its slowest
  hop and that hop's nominal ceiling (:func:`dtlab.topology.predict_pairs`), against the
  bandwidth row's measured busbw;
* :func:`multinode` -- the cross-node part cannot run from one process on one host: the row says
  how it runs (``python -m dtlab.check`` under torchrun on every node is
  :mod:`dtlab.multinode.check`: every rank present, no duplicate GPU, within- vs across-node
  all_reduce against the NIC's line rate) and how to rehearse it here.

>>> from dtlab.topology import load
>>> t = load("data/topologies/hgx-8xh100-sglang-30401-topo.txt")
>>> node0, every = cpu_list("0-47,96-143"), set(range(192))
>>> affinity_verdict(t, t["gpus"], [every] * 8, {})[0]   # not pinned: the default, no fault
'PASS'
>>> affinity_verdict(t, t["gpus"], [node0] * 8, {})[2][0].split(" (CPUs")[0]  # GPU4 on node 1
"rank 4 on GPU4 runs on CPUs 0-47,96-143, none of them on GPU4's NUMA node 1"
"""

from __future__ import annotations

import itertools
import os
import time

from ..topology.matrix import link_kind, link_order
from ..topology.predict import gdr_path, nearest_nic, path_between, predict_pairs, ring_bottleneck
from .report import PASS, SKIP, WARN, Row, row

SOURCE = "nvidia-smi topo -m (NVIDIA's legend: PIX < PXB < PHB < NODE < SYS)"


def cpu_list(text: str | None) -> set[int] | None:
    """'0-47,96-143' -> that set of CPUs; None for 'N/A', empty or unreadable text."""
    if not text or not text.strip() or text.strip().upper() == "N/A":
        return None
    out: set[int] = set()
    try:
        for part in text.strip().split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return None
    return out


def _span(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5' (as the kernel and nvidia-smi write CPU lists)."""
    s, runs = sorted(cpus), []
    for c in s:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs)


def gpu_cpus(topo: dict, gpu: str, node_cpus: dict[int, set[int]] | None = None) -> set[int] | None:
    """The CPUs local to ``gpu``: the matrix's CPU Affinity, else its NUMA node's CPUs."""
    cpus = cpu_list(topo["affinity"].get(gpu, {}).get("CPU Affinity"))
    node = topo["numa"].get(gpu)
    if cpus is None and node is not None and node_cpus:
        cpus = node_cpus.get(node)
    return cpus


def allowed_nics(topo: dict, env: dict[str, str]) -> list[str]:
    """The NICs NCCL may use under ``NCCL_IB_HCA`` (NCCL's env docs: a list of name prefixes,
    '=' for exact names, '^' to exclude; ':port' suffixes ignored here); all when unset."""
    spec = env.get("NCCL_IB_HCA", "").strip()
    if not spec:
        return list(topo["nics"])
    exclude, exact = spec.startswith("^"), False
    spec = spec.lstrip("^")
    if spec.startswith("="):
        exact, spec = True, spec[1:]
    names = [s.split(":")[0] for s in spec.split(",") if s]

    def hit(dev: str) -> bool:
        return any(dev == n if exact else dev.startswith(n) for n in names)

    return [n for n in topo["nics"] if hit(topo["nic_names"].get(n, n)) != exclude]


def affinity_verdict(topo: dict, gpus: list[str], cpus: list[set[int] | None],
                     env: dict[str, str], node_cpus: dict[int, set[int]] | None = None
                     ) -> tuple[str, list[str], list[str]]:
    """(verdict, what was found, warnings) for ranks ``0..n-1`` on ``gpus[r]`` with CPU sets
    ``cpus[r]`` (None: not known). WARN when a rank may run on no CPU of its GPU's NUMA node, or
    when the nearest NIC a GPU may use crosses the SMP interconnect (SYS) while a closer one
    exists. What cannot be told from the inputs is said, never guessed."""
    said, warns = [], []
    for r, (g, mine) in enumerate(zip(gpus, cpus)):
        local = gpu_cpus(topo, g, node_cpus)
        node = topo["numa"].get(g)
        where = f"NUMA node {node}" if node is not None else "its NUMA node"
        if local is None:
            said.append(f"rank {r} on {g}: the matrix gives no CPU affinity for it (unsure)")
        elif mine is None:
            said.append(f"rank {r} on {g}: its CPUs are not known (unsure)")
        elif not mine & local:
            warns.append(f"rank {r} on {g} runs on CPUs {_span(mine)}, none of them on {g}'s "
                         f"{where} (CPUs {_span(local)}): every copy to and from the GPU crosses "
                         f"the SMP interconnect")
        elif mine <= local:
            said.append(f"rank {r} on {g}: CPUs {_span(mine)} on {where}")
        else:
            said.append(f"rank {r} on {g}: not pinned to {where} ({len(mine & local)} of its "
                        f"{len(mine)} CPUs are; the scheduler may move it off)")
    if not topo["nics"]:
        said.append("no NIC in the matrix (one machine: the ranks need none)")
        return (WARN if warns else PASS), said, warns
    usable = allowed_nics(topo, env)
    for g in gpus:
        best_all, best = nearest_nic(topo, g), nearest_nic(topo, g, usable)
        if best is None:
            warns.append(f"{g}: NCCL_IB_HCA={env.get('NCCL_IB_HCA')} leaves no NIC in the matrix")
            continue
        name = topo["nic_names"].get(best[0], best[0])
        line = (f"{g}: nearest NIC {name} ({best[1]}, "
                f"{'GPUDirect RDMA' if gdr_path(best[1]) else 'through host memory'})")
        if link_kind(best[1]) == "SYS" and link_order(best_all[1]) < link_order(best[1]):
            other = topo["nic_names"].get(best_all[0], best_all[0])
            warns.append(f"{line}: across the SMP interconnect while {other} is {best_all[1]} "
                         f"(NCCL_IB_HCA={env.get('NCCL_IB_HCA')} leaves it out)")
        else:
            said.append(line + ("; every NIC is across the SMP interconnect from it"
                                if link_kind(best[1]) == "SYS" else ""))
    return (WARN if warns else PASS), said, warns


# -- the ring ------------------------------------------------------------------------------------

RING_SEARCH_MAX = 8  # every ring of up to 8 GPUs is tried (7! = 5040 orders from the first)


def ring_order(topo: dict, gpus: list[str]) -> tuple[list[str], str]:
    """The ring NCCL would plausibly build over ``gpus``, and how it was chosen. NCCL searches
    for rings whose slowest hop is fastest (``src/graph/search.cc``); the same here: of every
    ring starting at ``gpus[0]``, the one whose worst hop is best, then with the fewest such
    hops, then the earliest in rank order. It is a plausible ring, not NCCL's own: NCCL also
    weighs the NICs and runs several rings (channels) at once."""
    if len(set(topo["links"].get((a, b)) or topo["links"].get((b, a))
               for a in gpus for b in gpus if a != b)) <= 1:
        return list(gpus), "every pair has the same path: any order is the same ring"
    if len(gpus) > RING_SEARCH_MAX:
        return list(gpus), f"rank order (more than {RING_SEARCH_MAX} GPUs: not searched)"

    def cost(order):
        kinds = [link_order(path_between(topo, order[i], order[(i + 1) % len(order)]))
                 for i in range(len(order))]
        worst = max(kinds)
        return worst, kinds.count(worst)

    best = min(([gpus[0], *p] for p in itertools.permutations(gpus[1:])), key=cost)
    return best, "the ring whose slowest hop is fastest (as NCCL's search prefers)"


def ring_verdict(topo: dict, gpus: list[str], busbw: float | None, pass_fraction: float,
                 **predict_kw) -> tuple[str, dict]:
    """(verdict, facts) for the ring over ``gpus``: ``order``, ``how``, ``hop``, ``kind``,
    ``transport``, ``gbps`` (the hop's nominal one-direction ceiling, None when the source does
    not give it), ``note``. PASS when the measured ``busbw`` reaches ``pass_fraction`` of the
    hop's ceiling, WARN below it (something other than the topology holds it back); SKIP when
    either is unknown. Above the ceiling the ring was not the bound (NCCL's channels use other
    links too): PASS, and the note says the prediction was unsure."""
    order, how = ring_order(topo, gpus)
    ring = ring_bottleneck(topo, order)
    a, b = ring["hop"]
    pred = next(r for r in predict_pairs(topo, **predict_kw) if {r["a"], r["b"]} == {a, b})
    facts = {"order": order, "how": how, "hop": [a, b], "kind": ring["kind"],
             "transport": pred["transport"], "gbps": pred["gbps"], "why": pred["why"], "note": ""}
    if busbw is None or not pred["gbps"]:
        facts["note"] = ("no measured busbw to hold it to" if busbw is None else
                         "the source gives no rate for this hop's PCIe link")
        return SKIP, facts
    frac = busbw / pred["gbps"]
    facts["fraction"] = round(frac, 2)
    if frac > 1.05:
        facts["note"] = ("measured above this hop's ceiling: NCCL's rings use other links too, "
                         "so this ring was not the bound (the prediction was unsure)")
        return PASS, facts
    return (PASS if frac >= pass_fraction else WARN), facts


# -- reading this machine ------------------------------------------------------------------------

def node_cpus() -> dict[int, set[int]]:
    """Each NUMA node's CPUs, from the kernel (``/sys/devices/system/node/nodeN/cpulist``)."""
    out, base = {}, "/sys/devices/system/node"
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            try:
                with open(f"{base}/{name}/cpulist") as f:
                    cpus = cpu_list(f.read())
            except OSError:
                continue
            if cpus is not None:
                out[int(name[4:])] = cpus
    return out


def _bus(text: str) -> tuple[int, int, int] | None:
    """'00000000:1A:00.0' or '0000:1a:00.0' -> (domain, bus, device)."""
    try:
        dom, bus, rest = text.strip().split(":")
        return int(dom, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def cuda_to_matrix(ngpu: int) -> tuple[list[str], str]:
    """The matrix's name (GPU0, ...) of each CUDA device 0..ngpu-1, matched by PCI bus id (CUDA
    orders devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi by bus id and
    ignores CUDA_VISIBLE_DEVICES); identity, said so, where the bus ids cannot be read."""
    import torch

    from ..topology.live import nvidia_smi

    text = nvidia_smi("--query-gpu=index,pci.bus_id", "--format=csv,noheader") or ""
    smi = {}
    for ln in text.splitlines():
        idx, _, bus = ln.partition(",")
        if idx.strip().isdigit() and _bus(bus):
            smi[_bus(bus)] = f"GPU{idx.strip()}"
    names = []
    for i in range(ngpu):
        p = torch.cuda.get_device_properties(i)
        key = (getattr(p, "pci_domain_id", None), getattr(p, "pci_bus_id", None),
               getattr(p, "pci_device_id", None))
        names.append(smi.get(key))
    if None in names:
        return [f"GPU{i}" for i in range(ngpu)], "assumed: CUDA device i is the matrix's GPUi"
    return names, "by PCI bus id"


def _rank_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def read_machine(nprocs: int, backend: str) -> tuple[dict, list[str], str] | None:
    """This machine's matrix (parsed ``nvidia-smi topo -m``) and the matrix's name of each
    rank's GPU, with how they were matched; None on gloo or when nvidia-smi gives nothing. Read
    once per run, for the affinity and ring rows (which raise what reading it raised)."""
    from ..topology.live import nvidia_smi_topo
    from ..topology.matrix import parse_topo_matrix

    text = nvidia_smi_topo() if backend == "nccl" else None
    if text is None:
        return None
    return (parse_topo_matrix(text), *cuda_to_matrix(nprocs))


def affinity(nprocs: int, backend: str, machine) -> Row:
    t0 = time.monotonic()
    if isinstance(machine, BaseException):
        raise machine
    if machine is None:
        return row("affinity", t0, SKIP, f"ranks on {backend} (the CPU): no GPU, so no GPU-NUMA-"
                    "NIC affinity to hold the ranks to" if backend != "nccl" else
                    "nvidia-smi topo -m gave nothing here", todo="run on a machine with GPUs")
    topo, gpus, how = machine
    import dtlab

    try:
        cpus = [set(c) for c in dtlab.run(_rank_cpus, nprocs=nprocs, backend=backend,
                                          timeout=60).values]
        whose = "each rank's own (os.sched_getaffinity)"
    except Exception:  # noqa: BLE001 -- the ranks inherit this process's set: use it, say so
        cpus, whose = [set(os.sched_getaffinity(0))] * nprocs, "this process's (the ranks inherit it)"
    verdict, said, warns = affinity_verdict(topo, gpus, cpus, dict(os.environ), node_cpus())
    return row("affinity", t0, verdict, "; ".join(warns + said) + f" (CPU sets: {whose}; GPUs "
                f"matched to the matrix {how})",
                "each rank on CPUs of its GPU's NUMA node; each GPU's NIC not across the SMP "
                "interconnect when a closer one exists", SOURCE,
                "" if verdict == PASS else "pin each rank to its GPU's NUMA node (numactl "
                "--cpunodebind, torchrun --numa-binding); NCCL_IB_HCA listing each GPU's nearest "
                "NIC (section 03)")


def ring(nprocs: int, backend: str, busbw: float | None, pass_fraction: float, machine) -> Row:
    t0 = time.monotonic()
    from ..topology.live import nvml_facts
    from ..topology.nccl_xml import PCIE_GEN, pcie_gbps

    if isinstance(machine, BaseException):
        raise machine
    if machine is None:
        return row("ring", t0, SKIP, f"ranks on {backend} (the CPU): no GPU ring to predict"
                    if backend != "nccl" else "nvidia-smi topo -m gave nothing here",
                    todo="run on a machine with 2 or more GPUs")
    import torch

    topo, gpus, how = machine
    topo = {**topo, "gpu_info": {g: dict(v) for g, v in topo.get("gpu_info", {}).items()}}
    info = topo["gpu_info"]
    for i, g in enumerate(gpus):  # what the matrix lacks: the NVLink generation, the PCIe rate
        major, minor = torch.cuda.get_device_capability(i)
        info.setdefault(g, {})["sm"] = major * 10 + minor
    for f in nvml_facts() or []:
        gt = next((r for r, n in PCIE_GEN.items() if n == f.get("pcie_max_gen")), None)
        if gt and f.get("pcie_max_width") and f"GPU{f['index']}" in info:
            info[f"GPU{f['index']}"]["pcie_gbps"] = pcie_gbps(f"{gt} GT/s", f["pcie_max_width"])
    verdict, x = ring_verdict(topo, gpus, busbw, pass_fraction)
    ceiling = f"{x['gbps']:.0f} GB/s ({x['why']})" if x["gbps"] else "unknown"
    said = (f"ring {' -> '.join(x['order'])}: slowest hop {'-'.join(x['hop'])} {x['kind']} "
            f"({x['transport']}), ceiling {ceiling}" + (f"; busbw {busbw:.1f} GB/s = "
            f"{x['fraction']:.2f} of it" if "fraction" in x else "")
            + (f"; {x['note']}" if x["note"] else "") + f" (ring: {x['how']}; GPUs {how})")
    return row("ring", t0, verdict, said,
                f"the bandwidth row's busbw >= {pass_fraction:.2f} of the slowest hop's ceiling",
                SOURCE + "; NCCL's P2P rules (src/graph/paths.cc); NVLink/PCIe rates from "
                "NVIDIA's datasheets and the PCI-SIG",
                "" if verdict in (PASS, SKIP) else "the links allow more: look at the transport "
                "NCCL chose (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=GRAPH prints its rings; sections "
                "03, 06)")


def multinode(nprocs: int, backend: str) -> Row:
    """Where the cross-node part runs: not here (a SKIP saying how), since ``dtlab check`` is one
    process on one host; under torchrun, ``python -m dtlab.check`` is that part."""
    t0 = time.monotonic()
    per = nprocs if backend == "nccl" else 1
    return row("multinode", t0, SKIP, "one host: the cross-node part (every rank present, no "
                "duplicate GPU, within- vs across-node all_reduce against the NIC's line rate) "
                "runs under torchrun on every node, with `python -m dtlab.check` as its entry",
                todo=f"`dtlab multinode script --nodes N --gpus-per-node {per} --entry "
                     f"'-m dtlab.check'` (add --slurm for sbatch) and run its lines; rehearse it "
                     f"on this machine: `sudo dtlab multinode simulate` (section 04)")
