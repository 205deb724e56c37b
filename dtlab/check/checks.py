"""The checks of ``dtlab check`` (the package docstring lists them), each a function that returns
one :class:`~.report.Row`, and the verdict rules they use, kept apart from the measuring so that
tests can hold them to recorded inputs (:func:`bandwidth_verdict`, :func:`env_rows`,
:func:`collectives_verdict`); the full level's are in :mod:`.full`, and a check that could not
run is named by :mod:`.failures` where its error has a name."""

from __future__ import annotations

import os
import shutil
import time

from ..topology.live import nvidia_smi
from .report import FAIL, PASS, SKIP, WARN, Report, Row, row

LEVELS = ("quick", "standard", "full")

# A healthy machine's 1 GiB all_reduce busbw as a fraction of its links' ceiling (per direction):
# 2x H200 NV18, ceiling 18 x 25 GB/s = 450 GB/s: nccl-tests 327.4 GB/s (0.73,
# data/h200x2-nccl-tests/nt_all_reduce.txt) and dtlab 330.5 GB/s (0.73,
# data/h200x2-dtlab-bench/bandwidth_gpu.csv), two jobs on 2026-11-26. PASS from 0.60, below the
# healthy 0.73 by a margin for other drivers and GPUs; FAIL under 0.30 -- the same pair with
# NCCL_P2P_DISABLE=1 (through host memory) reached 27.7 GB/s, 0.06 (data/h200x2-tuning/tuning.csv).
HEALTHY_FRACTION = 0.73
PASS_FRACTION, FAIL_FRACTION = 0.60, 0.30
BANDWIDTH_BYTES = 1 << 30

# Variables that make NCCL slower or weaker on purpose: set by someone debugging, then forgotten
# (NVIDIA's NCCL environment-variable documentation, docs.nvidia.com/deeplearning/nccl/user-guide/
# docs/env.html, says what each does).
SLOWING = {
    "NCCL_P2P_DISABLE": "GPU-to-GPU transfers go through host memory instead of NVLink/PCIe P2P",
    "NCCL_SHM_DISABLE": "no shared-memory transport between processes of one node",
    "NCCL_IB_DISABLE": "no InfiniBand/RoCE: sockets between nodes",
    "NCCL_ALGO": "the algorithm is forced instead of chosen per call by NCCL's model",
    "NCCL_PROTO": "the protocol is forced instead of chosen per call by NCCL's model",
    "NCCL_MAX_NCHANNELS": "caps the channels (parallel streams of a collective)",
    "NCCL_MIN_NCHANNELS": "forces a channel count",
    "NCCL_NET_GDR_LEVEL": "changes when the NIC may read GPU memory directly",
    "NCCL_P2P_LEVEL": "changes which GPU pairs may use P2P",
    "NCCL_BUFFSIZE": "changes the per-channel buffer (default 4 MiB)",
    "NCCL_LAUNCH_MODE": "changes how kernels of several GPUs in one process are launched",
}
# Reported, never changed: NVLink multicast (NVLS) on or off is the machine owner's decision
MULTICAST = {
    "NCCL_NVLS_ENABLE": "NVLink SHARP (multicast through the NVSwitches) for all_reduce",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "torch's symmetric memory without multicast objects",
    "NVSHMEM_DISABLE_NVLS": "NVSHMEM without NVLink SHARP",
}
INFORMATIVE = {
    "NCCL_DEBUG": "how much NCCL logs (INFO: init, transports, channels)",
    "NCCL_DEBUG_SUBSYS": "which parts of NCCL log",
    "NCCL_DEBUG_FILE": "where NCCL's log goes (%h host, %p pid)",
    "NCCL_SOCKET_IFNAME": "the network interface for NCCL's bootstrap and sockets",
    "GLOO_SOCKET_IFNAME": "the network interface gloo uses",
    "NCCL_GRAPH_MIXING_SUPPORT": "support for graph launches beside eager calls on one communicator",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "what torch's watchdog does on a failed or timed-out collective",
    "TORCH_NCCL_BLOCKING_WAIT": "wait() blocks the host until the collective ends",
    "TORCH_DISTRIBUTED_DEBUG": "extra checks of collectives' shapes and order (DETAIL)",
    "NCCL_VERSION": "a label the container image sets, not an NCCL setting",
}


# -- 1. software -------------------------------------------------------------------------------

def env_rows(env: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """(verdict, what is set and what each does, warnings) for the environment ``env``."""
    said, warns = [], []
    for k in sorted(env):
        if k in SLOWING:
            warns.append(f"{k}={env[k]}: {SLOWING[k]}")
        elif k in MULTICAST:
            said.append(f"{k}={env[k]}: {MULTICAST[k]} (reported, not changed)")
        elif k in INFORMATIVE:
            said.append(f"{k}={env[k]}: {INFORMATIVE[k]}")
        elif k.startswith(("NCCL_", "TORCH_NCCL_")):
            said.append(f"{k}={env[k]}: see NVIDIA's NCCL / torch's NCCL variable docs")
    return (WARN if warns else PASS), said, warns


def software() -> Row:
    t0 = time.monotonic()
    import torch

    parts = [f"torch {torch.__version__}"]
    if torch.version.cuda:
        parts.append(f"CUDA {torch.version.cuda}")
        try:
            parts.append("NCCL " + ".".join(map(str, torch.cuda.nccl.version())))
        except Exception:  # noqa: BLE001 -- a build without NCCL says so by failing
            parts.append("no NCCL")
        driver = nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
        if driver:
            parts.append(f"driver {driver.splitlines()[0].strip()}")
    else:
        parts.append("CPU-only build")
    verdict, said, warns = env_rows(dict(os.environ))
    measured = ", ".join(parts) + ("; " + "; ".join(warns + said) if warns or said else
                                   "; no NCCL/torch-distributed variables set")
    return row("software", t0, verdict, measured,
                "no variable that slows NCCL down on purpose", "NVIDIA's NCCL env-variable docs",
                "unset it unless you mean it (section 06 measures what each does)" if warns else "")


# -- 2. GPUs through NVML -----------------------------------------------------------------------

def gpus() -> Row:
    t0 = time.monotonic()
    if not shutil.which("nvidia-smi") and not os.path.exists("/proc/driver/nvidia"):
        return row("gpus", t0, SKIP, "no NVIDIA GPU here (no driver, no nvidia-smi)")
    try:
        import pynvml
    except ImportError:
        return row("gpus", t0, SKIP, "NVML's Python bindings are not installed",
                    todo="pip install nvidia-ml-py (on a machine with NVIDIA GPUs)")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 -- NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return row("gpus", t0, SKIP, f"no NVIDIA driver here ({type(e).__name__})")
    try:
        n = pynvml.nvmlDeviceGetCount()
        problems, seen = [], []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            # the width only: an idle GPU lowers its link generation to save power, by design
            gen = _call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h)
            width = _call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h)
            mwidth = _call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)
            seen.append(f"GPU{i} PCIe gen{gen} x{width}")
            if None not in (width, mwidth) and width < mwidth:
                problems.append(f"GPU{i} PCIe x{width} of x{mwidth} (downtrained)")
            ecc = _call(pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        pynvml.NVML_VOLATILE_ECC)
            if ecc:
                problems.append(f"GPU{i} {ecc} uncorrected ECC errors since boot")
            pending = _call(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
            if pending:
                problems.append(f"GPU{i} retired pages pending (reset the GPU)")
        if not n:
            return row("gpus", t0, SKIP, "NVML sees no GPU")
        return row("gpus", t0, FAIL if any("ECC" in p for p in problems) else
                    WARN if problems else PASS,
                    "; ".join(problems) if problems else ", ".join(seen),
                    "links at their maximum width, no uncorrected ECC error, no page pending",
                    "NVML (nvidia-ml-py)",
                    "reseat or replace the card / reset the GPU; ask the machine's owner" if problems
                    else "")
    finally:
        pynvml.nvmlShutdown()


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 -- not supported on this GPU: not known, not a fault
        return None


# -- 3. collectives ------------------------------------------------------------------------------

def collectives_verdict(failures: list[tuple[str, str, str, str]], backend: str
                        ) -> tuple[str, list[str], list[str]]:
    """(verdict, failures that are this machine's, known torch bugs hit) from ``(op, dtype,
    check, detail)`` of each failed validation row. A known torch bug is no fault of the
    machine (:data:`dtlab.collectives.report.KNOWN_BUGS`): it is named with its upstream issue,
    and the verdict stays PASS."""
    from ..collectives.report import KNOWN_BUGS

    own, known = [], []
    for op, dtype, check, detail in failures:
        bug = KNOWN_BUGS.get((backend, op, check))
        if bug:
            known.append(f"{op} {check} ({bug})")
        else:
            own.append(f"{op} {dtype} {check}: {detail}")
    return (FAIL if own else PASS), own, list(dict.fromkeys(known))


def collectives(nprocs: int, backend: str) -> Row:
    t0 = time.monotonic()
    from ..collectives import validate_all

    rep = validate_all(nprocs=nprocs, backend=backend)
    c = rep.counts()
    verdict, own, known = collectives_verdict(
        [(r.op, r.dtype, r.check, r.detail) for r in rep.failures], rep.backend)
    what = f"{c['pass']} passed, {c['fail']} failed, {c['unsupported']} unsupported"
    if own:
        what += "; " + "; ".join(own[:3]) + (f" (and {len(own) - 3} more)" if len(own) > 3 else "")
    if known:
        what += (f"; the failures are known bugs of torch's {rep.backend}, not of this machine: "
                 + ", ".join(known))
    return row("collectives", t0, verdict, what,
                "every op, dtype and size right on every rank", "dtlab validate (section 01)",
                "run `dtlab validate --backend "
                f"{rep.backend}` for every row; section 01 explains the checks" if own else "")


# -- 4. bandwidth --------------------------------------------------------------------------------

def bandwidth_verdict(busbw: float, ceiling: float) -> str:
    frac = busbw / ceiling
    return PASS if frac >= PASS_FRACTION else FAIL if frac < FAIL_FRACTION else WARN


def link_ceiling() -> tuple[float | None, str]:
    """The per-direction GB/s of the slowest GPU's links, and how it was found."""
    from ..bench.ceiling import data_rate, nvlink_rates

    text = nvidia_smi("nvlink", "-s")
    if text:
        try:
            links = {g: rs for g, rs in nvlink_rates(text).items() if rs}
        except ValueError:
            links = {}
        if links:
            rates = {g: sum(data_rate(r) for r in rs) for g, rs in links.items()}
            g = min(rates, key=rates.get)
            return rates[g], f"NVLink: {len(links[g])} links on GPU{g}, {rates[g]:.0f} GB/s per " \
                             f"direction (nvidia-smi nvlink -s, data rate per link from NVIDIA's " \
                             f"datasheets)"
    try:
        import pynvml

        from ..topology.nccl_xml import PCIE_GEN, pcie_gbps

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            gen = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
            width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
        finally:
            pynvml.nvmlShutdown()
        gt = next((rate for rate, g in PCIE_GEN.items() if g == gen), None)
        bw = pcie_gbps(f"{gt} GT/s", width) if gt else None
        if bw:
            return bw, f"PCIe gen{gen} x{width}: {bw:.0f} GB/s per direction (PCI-SIG rates, NVML)"
    except Exception:  # noqa: BLE001 -- no NVML: no ceiling known
        pass
    return None, ""


def _figure(make) -> dict[str, str]:
    """A picture for ``--html``; none, rather than a failed check, if it cannot be drawn."""
    try:
        return make()
    except Exception:  # noqa: BLE001 -- no matplotlib, no display: the table still stands
        return {}


def bandwidth(nprocs: int, backend: str, curve: bool = False, links=None,
              into: dict | None = None):
    """The bandwidth row; with ``curve``, sizes from 1 MiB to 1 GiB too, and their picture
    (``(row, {"bandwidth": png})``). ``links``: :func:`link_ceiling`'s answer, when the caller
    has it already; ``into`` gets the measured ``busbw`` (the full level's ring holds it to the
    ring's slowest hop)."""
    t0 = time.monotonic()
    if backend != "nccl":
        return row("bandwidth", t0, SKIP, f"ranks on {backend} (the CPU): no GPU links to hold "
                    "a measurement to", todo="run on a machine with 2 or more GPUs")
    ceiling, how = links or link_ceiling()
    from ..bench import sweep

    df = sweep("all_reduce", 1 << 20 if curve else BANDWIDTH_BYTES, BANDWIDTH_BYTES, factor=4,
               nprocs=nprocs, backend="nccl", iters=10, warmup=3, progress=False).frame
    busbw = float(df.loc[df["size"] == BANDWIDTH_BYTES, "ip_busbw"].max())
    if into is not None:
        into["busbw"] = busbw
    figs = {}
    if curve:
        from .figures import bandwidth_png

        figs = _figure(lambda: {"bandwidth": bandwidth_png(
            list(df["size"]), list(df["ip_busbw"]), ceiling, PASS_FRACTION, HEALTHY_FRACTION)})
    if ceiling is None:
        return row("bandwidth", t0, SKIP, f"1 GiB all_reduce busbw {busbw:.1f} GB/s; the links' "
                    "ceiling is unknown here (no nvidia-smi nvlink, no NVML)",
                    todo="pip install nvidia-ml-py"), figs
    verdict = bandwidth_verdict(busbw, ceiling)
    return row("bandwidth", t0, verdict,
                f"1 GiB all_reduce busbw {busbw:.1f} GB/s = {busbw / ceiling:.2f} of the ceiling",
                f">= {PASS_FRACTION:.2f} of {ceiling:.0f} GB/s ({how}); healthy 2x H200 reached "
                f"{HEALTHY_FRACTION:.2f}, with NCCL_P2P_DISABLE=1 0.06",
                "data/h200x2-nccl-tests, data/h200x2-tuning",
                "" if verdict == PASS else "look at the transport NCCL chose (NCCL_DEBUG=INFO: "
                "'via P2P' or 'via SHM'), the variables above, and the topology (sections 02, 03, 06)"
                ), figs


# -- 5. the failure path -------------------------------------------------------------------------

FAILURE_BOUND_S = 60.0  # the reproduction's own timeout is 20 s; start-up and stacks on top


def failure_path(nprocs: int, backend: str) -> Row:
    t0 = time.monotonic()
    import tempfile

    import psutil

    from ..hang import reproduce

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    shown = os.environ.get("DTLAB_OUTPUT")
    os.environ["DTLAB_OUTPUT"] = "none"  # the planted failure's rank output is not the table's
    try:
        with tempfile.TemporaryDirectory(prefix="dtlab-check-") as out:
            d = reproduce("size_mismatch", nprocs=nprocs, backend=backend, timeout=20,
                          out=os.path.join(out, "ev"), detail=False).diagnosis
    finally:
        if shown is None:
            os.environ.pop("DTLAB_OUTPUT", None)
        else:
            os.environ["DTLAB_OUTPUT"] = shown
    took = time.monotonic() - t0
    left = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before
            and p.status() != psutil.STATUS_ZOMBIE]
    right = d.failure_class == "size_mismatch"
    verdict = PASS if right and took <= FAILURE_BOUND_S and not left else FAIL
    said = f"a planted size mismatch diagnosed as {d.failure_class} in {took:.1f} s"
    if left:
        said += f"; processes left behind: {left}"
    return row("failure", t0, verdict, said,
                f"size_mismatch within {FAILURE_BOUND_S:.0f} s, nothing left behind",
                "dtlab hang size_mismatch (section 07)",
                "" if verdict == PASS else "run `dtlab hang size_mismatch` and read its evidence "
                "(section 07); a wrong diagnosis here is a bug to report")


# -- 6. the P2P copy matrix (standard) ---------------------------------------------------------

# Every pair's copy rate against the median of all pairs (a slow pair: below SLOW_PAIR of it,
# :func:`dtlab.bench.slow_pairs`) and the slowest pair against the links' ceiling. Healthy 2x
# H200 NV18: 386.8 and 386.6 GB/s one way, 0.86 of 450 GB/s (data/h200x2-bandwidth/p2p.csv,
# 2026-11-26); a pair without peer access is staged through host memory by the driver.
HEALTHY_COPY_FRACTION = 0.86
SLOW_PAIR = 0.75
P2P_BYTES = 256 << 20


def p2p_verdict(rows: list[dict], ceiling: float | None) -> tuple[str, str]:
    """(verdict, what is wrong) for p2p_matrix rows: FAIL for a pair without peer access or
    below SLOW_PAIR of the median, or the slowest pair under FAIL_FRACTION of the ceiling; WARN
    under PASS_FRACTION of it; else PASS."""
    from ..bench import slow_pairs

    no_peer = [f"{r['src']}->{r['dst']}" for r in rows if not r["peer_access"]]
    slow = [f"{i}->{j}" for i, j in slow_pairs(rows, "uni_GBps", SLOW_PAIR)]
    if no_peer or slow:
        said = "; ".join(x for x in (
            f"no peer access (copies staged through host memory): {', '.join(no_peer)}" if no_peer else "",
            f"below {SLOW_PAIR:.2f} of the median pair: {', '.join(slow)}" if slow else "") if x)
        return FAIL, said
    if ceiling:
        frac = min(r["uni_GBps"] for r in rows) / ceiling
        if frac < PASS_FRACTION:
            return (FAIL if frac < FAIL_FRACTION else WARN,
                    f"every pair alike, but the slowest at {frac:.2f} of the links' ceiling")
    return PASS, ""


def p2p(nprocs: int, backend: str, links=None):
    """The P2P row and its picture (``(row, {"p2p": png})``); ``links`` as for :func:`bandwidth`."""
    t0 = time.monotonic()
    if backend != "nccl":
        return row("p2p", t0, SKIP, f"ranks on {backend} (the CPU): no GPU pairs to copy "
                    "between", todo="run on a machine with 2 or more GPUs")
    from ..bench import p2p_matrix

    rows = p2p_matrix(size=P2P_BYTES, iters=10, warmup=2).to_dict("records")
    ceiling, how = links or link_ceiling()
    verdict, wrong = p2p_verdict(rows, ceiling)
    lo = min(rows, key=lambda r: r["uni_GBps"])
    hi = max(r["uni_GBps"] for r in rows)
    said = (f"{len(rows)} ordered pairs, 256 MiB copies: {lo['uni_GBps']:.0f}-{hi:.0f} GB/s one "
            f"way (slowest {lo['src']}->{lo['dst']})" + (f"; {wrong}" if wrong else ""))
    expected = (f"every pair >= {SLOW_PAIR:.2f} of the median, with peer access"
                + (f"; the slowest >= {PASS_FRACTION:.2f} of {ceiling:.0f} GB/s ({how})"
                   if ceiling else "") + f"; healthy 2x H200 copied at {HEALTHY_COPY_FRACTION:.2f}")
    from .figures import p2p_png

    return row("p2p", t0, verdict, said, expected, "data/h200x2-bandwidth/p2p.csv",
                "" if verdict == PASS else "`dtlab bench --p2p` for the whole matrix; "
                "`nvidia-smi topo -m` and `nvidia-smi nvlink -s` for the slow pair's links "
                "(sections 02, 03)"), _figure(lambda: {"p2p": p2p_png(rows)})


# -- 7. small-message latency (standard) ---------------------------------------------------------

# dtlab's CUDA-graph all_reduce of 8 B-1 KiB on a healthy 2x H200 NV18 pair, 100 replays of 20
# calls as this check times it: median 4.9 us over three rounds (4.91, 4.90, 4.96; every size
# 4.7-5.1 us; data/h200x2-graph-replays/rounds.tgz r*_dtlab_G100.csv, 2026-11-27), 5.0 us in the
# recorded standard-level runs (data/h200x2-check-standard/). PASS up to twice the median; no
# floor is recorded for other links, where the row only reports.
LATENCY_FLOOR_US = 4.9
LATENCY_SIZES = (8, 1024)


def latency_verdict(median_us: float, nvlink: bool) -> str:
    if not nvlink:
        return SKIP
    return PASS if median_us <= 2 * LATENCY_FLOOR_US else WARN


def latency(nprocs: int, backend: str, links=None) -> Row:
    t0 = time.monotonic()
    if backend != "nccl":
        return row("latency", t0, SKIP, f"ranks on {backend} (the CPU): CUDA graphs need "
                    "NCCL on GPUs", todo="run on a machine with 2 or more GPUs")
    from ..bench import sweep

    df = sweep("all_reduce", *LATENCY_SIZES, nprocs=nprocs, backend="nccl", iters=20, warmup=5,
               graph=True, progress=False).frame
    med = float(df["ip_time_us"].median())
    ceiling, how = links or link_ceiling()
    nvlink = how.startswith("NVLink")
    verdict = latency_verdict(med, nvlink)
    said = f"all_reduce 8 B-1 KiB in CUDA graphs: median {med:.1f} us per call"
    if not nvlink:
        said += "; no recorded floor for these links to hold it to"
    return row("latency", t0, verdict, said,
                f"<= {2 * LATENCY_FLOOR_US:.0f} us on NVLink (healthy 2x H200: median "
                f"{LATENCY_FLOOR_US} us)", "data/h200x2-graph-replays",
                "" if verdict in (PASS, SKIP) else "look for CPU contention and GPU clocks "
                "(nvidia-smi -q -d PERFORMANCE), then the transport (NCCL_DEBUG=INFO; sections 02, 06)")


# -- 8. DDP parity (standard) ------------------------------------------------------------------

def parity(nprocs: int, backend: str) -> Row:
    t0 = time.monotonic()
    from ..parity.ddp import compare

    rep = compare("none", nprocs=nprocs, backend=backend, steps=8, dtype="float64")
    verdict = PASS if rep.parity else FAIL
    said = (f"DDP on {nprocs} ranks vs one process, 8 steps in float64: max |diff| "
            f"{rep.max_abs_diff:.2g}" if rep.max_abs_diff is not None else
            f"DDP did not complete: {(rep.error or '').splitlines()[0][:200]}")
    return row("parity", t0, verdict, said, f"max |diff| <= {rep.tolerance:g} (float64 "
                "sums in another order)", "dtlab parity (section 05)",
                "" if verdict == PASS else "run `dtlab parity` and read where the two runs "
                "part (section 05)")


# -- a check that could not run ---------------------------------------------------------------

def could_not_run(name: str, t0: float, e: BaseException) -> Row:
    """The FAIL row of a check that raised: what failed by its name where NCCL or CUDA gives it
    one (:func:`.failures.name_failure`: a duplicate GPU, a hidden one), else the error's first
    line."""
    from .failures import error_text, name_failure

    named = name_failure(error_text(e))
    if named:
        return row(name, t0, FAIL, f"could not run: {named[0]}", todo=named[1])
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return row(name, t0, FAIL, f"could not run: {type(e).__name__}: {first}",
                todo="run that part alone (dtlab validate, dtlab bench, dtlab hang) to see its "
                     "whole error")


# -- the level ------------------------------------------------------------------------------------

def run(level: str = "quick", nprocs: int | None = None, progress: bool = False) -> Report:
    """Every check of ``level`` on ``nprocs`` ranks (default: the GPUs if there are 2 or more,
    else 2 ranks on gloo)."""
    if level not in LEVELS:
        raise ValueError(f"--level {level!r}: choose {', '.join(LEVELS[:-1])} or {LEVELS[-1]}")
    import torch

    from ..limits import whole

    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = "nccl" if ngpu >= 2 else "gloo"
    if nprocs is None:
        nprocs = ngpu if backend == "nccl" else 2
    nprocs = whole("nprocs", nprocs, 2, ngpu if backend == "nccl" else 64,
                   "one rank per GPU" if backend == "nccl" else "gloo ranks on this CPU")
    try:  # the links' ceiling, found once for the checks that hold a measurement to it
        links = link_ceiling() if backend == "nccl" else None
    except Exception:  # noqa: BLE001 -- each such check then finds it itself, and fails there
        links = None
    rows, measured = [], {}
    checks = [("software", software), ("gpus", gpus),
              ("collectives", lambda: collectives(nprocs, backend)),
              ("bandwidth", lambda: bandwidth(nprocs, backend, level != "quick", links, measured)),
              ("failure", lambda: failure_path(nprocs, backend))]
    if level in ("standard", "full"):
        checks += [("p2p", lambda: p2p(nprocs, backend, links)),
                   ("latency", lambda: latency(nprocs, backend, links)),
                   ("parity", lambda: parity(nprocs, backend))]
    if level == "full":
        from . import full

        try:  # the matrix and each rank's GPU in it, read once for both topology rows
            machine = full.read_machine(nprocs, backend)
        except Exception as e:  # noqa: BLE001 -- raised again by each row: a FAIL row each
            machine = e
        checks += [("affinity", lambda: full.affinity(nprocs, backend, machine)),
                   ("ring", lambda: full.ring(nprocs, backend, measured.get("busbw"),
                                              PASS_FRACTION, machine)),
                   ("multinode", lambda: full.multinode(nprocs, backend))]
    figures = {}
    for name, fn in checks:
        if progress:
            print(f"dtlab check: {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            got = fn()
            row, figs = got if isinstance(got, tuple) else (got, {})
            rows.append(row)
            figures.update(figs)
        except Exception as e:  # noqa: BLE001 -- a check that cannot run is the finding
            rows.append(could_not_run(name, t0, e))
    return Report(rows, level=level, backend=backend, nprocs=nprocs, figures=figures)
