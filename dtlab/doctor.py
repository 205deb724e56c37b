"""``dtlab doctor``: is this machine ready to run the course? One screen, a next step per problem.

Checks, in the order a person debugging a cluster node would ask them: Python and torch; CUDA
and the GPUs; how the GPUs are linked; NCCL and gloo; whether two ranks can actually meet and
all-reduce (a live launch through ``dtlab.run``); whether py-spy may attach to a rank (the hang
tools need it); shared memory (NCCL's intra-node transport); and NCCL settings in the
environment.

    $ dtlab doctor            # the table
    $ dtlab doctor --json     # the same, for scripts
    $ dtlab doctor --no-launch
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    next_step: str = ""


def _python() -> Check:
    v = sys.version_info
    st = OK if v >= (3, 10) else FAIL
    return Check("python", st, f"{platform.python_version()} ({sys.executable})",
                 "" if st == OK else "dtlab needs Python 3.10 or newer")


def _torch() -> tuple[Check, object | None]:
    try:
        import torch
    except Exception as e:  # noqa: BLE001 -- any import failure is the finding
        return Check("torch", FAIL, f"cannot import torch: {e}", "run `make test` or "
                     "`pip install torch` in this environment"), None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    return Check("torch", OK, f"{torch.__version__} ({build})"), torch


def _gpus(torch) -> tuple[Check, int]:
    if torch is None:
        return Check("gpus", FAIL, "torch missing"), 0
    if not torch.version.cuda:
        return Check("gpus", INFO, "CPU-only torch build: ranks use gloo on the CPU",
                     "on a GPU machine install a CUDA build of torch"), 0
    try:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as e:  # noqa: BLE001
        return Check("gpus", FAIL, f"CUDA error: {e}", "check the driver: `nvidia-smi`"), 0
    if n == 0:
        return Check("gpus", WARN, "no visible CUDA device (is CUDA_VISIBLE_DEVICES empty? "
                     "driver loaded?)", "run `nvidia-smi`; without GPUs the course uses gloo"), 0
    names = []
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        names.append(f"cuda:{i} {p.name} {p.total_memory / 2**30:.0f} GiB")
    return Check("gpus", OK, f"{n}: " + "; ".join(names)), n


def _links(torch, ngpu: int) -> Check:
    if ngpu < 2:
        return Check("gpu links", INFO, "fewer than 2 GPUs: nothing to link")
    from .topology import nvidia_smi_topo, parse_topo_matrix

    peer = []
    for i in range(ngpu):
        for j in range(ngpu):
            if i < j:
                peer.append(f"{i}<->{j} {'P2P' if torch.cuda.can_device_access_peer(i, j) else 'no P2P'}")
    text = nvidia_smi_topo()
    kinds = ""
    if text:
        try:
            m = parse_topo_matrix(text)
            pairs = sorted({f"{a}-{b}: {v}" for (a, b), v in m["links"].items()
                            if a < b and a.startswith("GPU") and b.startswith("GPU")})
            kinds = "; ".join(pairs) + "; "
        except ValueError:
            kinds = ""
    no_p2p = any("no P2P" in p for p in peer)
    return Check("gpu links", WARN if no_p2p else OK, kinds + ", ".join(peer),
                 "no peer access: NCCL falls back to SHM/host memory (slower); check "
                 "`nvidia-smi topo -m` and NCCL_P2P_DISABLE" if no_p2p else "")


def _backends(torch) -> list[Check]:
    out = []
    if torch is None:
        return out
    import torch.distributed as dist

    if not dist.is_available():
        return [Check("torch.distributed", FAIL, "not built into this torch",
                      "install a torch build with distributed support")]
    out.append(Check("gloo", OK if dist.is_gloo_available() else FAIL,
                     "available" if dist.is_gloo_available() else "missing",
                     "" if dist.is_gloo_available() else "install an official torch wheel"))
    if dist.is_nccl_available() and torch.version.cuda:
        v = ".".join(map(str, torch.cuda.nccl.version()))
        out.append(Check("nccl", OK, f"available, NCCL {v}"))
    else:
        out.append(Check("nccl", INFO, "not available (CPU build): the course uses gloo + "
                         "recorded GPU evidence"))
    return out


def _launch(backends: list[str]) -> list[Check]:
    from . import run

    out = []
    for be in backends:
        t0 = time.monotonic()
        try:
            quiet, os.environ["DTLAB_OUTPUT"] = os.environ.get("DTLAB_OUTPUT"), "none"
            try:
                res = run(_allreduce_probe, nprocs=2, backend=be, timeout=120)
            finally:
                if quiet is None:
                    del os.environ["DTLAB_OUTPUT"]
                else:
                    os.environ["DTLAB_OUTPUT"] = quiet
            ok = res.values == [1.0, 1.0]
            out.append(Check(f"launch {be}", OK if ok else FAIL,
                             f"2 ranks met and all-reduced in {time.monotonic() - t0:.1f} s"
                             + ("" if ok else f" but got {res.values}"),
                             "" if ok else "report this: all_reduce returned a wrong sum"))
        except Exception as e:  # noqa: BLE001 -- the failure is the finding
            first = str(e).splitlines()[0]
            out.append(Check(f"launch {be}", FAIL, f"{type(e).__name__}: {first}",
                             "run `dtlab doctor` with NCCL_DEBUG=INFO, or see the error above"))
    return out


def _allreduce_probe():
    import torch
    import torch.distributed as dist

    from .runtime.context import device

    t = torch.full((1,), float(dist.get_rank()), device=device())
    dist.all_reduce(t)
    return t.item()


def _py_spy() -> Check:
    from .runtime.stacks import py_spy_dump, py_spy_path

    exe = py_spy_path()
    scope = ""
    try:
        scope = open("/proc/sys/kernel/yama/ptrace_scope").read().strip()
    except OSError:
        pass
    scope_txt = f"; ptrace_scope={scope}" if scope else ""
    if not exe:
        return Check("py-spy", WARN, "not installed: hang stacks fall back to faulthandler",
                     "pip install py-spy")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        ok, text = py_spy_dump(child.pid)
    finally:
        child.kill()
        child.wait()
    if ok:
        return Check("py-spy", OK, f"can attach to ranks{scope_txt}")
    return Check("py-spy", WARN, f"cannot attach ({text.splitlines()[0] if text else '?'}{scope_txt}); "
                 "hang stacks fall back to faulthandler",
                 "allow ptrace: run as root, add CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE), or "
                 "`sysctl kernel.yama.ptrace_scope=0`")


def _shm() -> Check:
    if not os.path.isdir("/dev/shm"):
        return Check("/dev/shm", INFO, "not present on this OS")
    total = shutil.disk_usage("/dev/shm").total
    gib = total / 2**30
    if total < 1 << 30:
        return Check("/dev/shm", WARN, f"{gib:.2f} GiB: NCCL's shared-memory transport and "
                     "DataLoader workers can fail with bus errors",
                     "give the container more (docker run --shm-size=16g, or --ipc=host)")
    return Check("/dev/shm", OK, f"{gib:.1f} GiB")


def _nccl_env() -> Check:
    keys = sorted(k for k in os.environ if k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED")))
    if not keys:
        return Check("nccl env", INFO, "no NCCL_* / TORCH_NCCL_* variables set (defaults)")
    detail = ", ".join(f"{k}={os.environ[k]}" for k in keys)
    nvls = os.environ.get("NCCL_NVLS_ENABLE")
    return Check("nccl env", INFO, detail,
                 "NCCL_NVLS_ENABLE=0 is set: keep it (NVLink multicast off)" if nvls == "0" else "")


def diagnose(launch: bool = True) -> Checkup:
    checks = [_python()]
    tc, torch = _torch()
    checks.append(tc)
    gc, ngpu = _gpus(torch)
    checks.append(gc)
    if torch is not None:
        checks.append(_links(torch, ngpu))
    backs = _backends(torch)
    checks += backs
    if launch and torch is not None:
        ready = [c.name for c in backs if c.name in ("gloo", "nccl") and c.status == OK]
        if "nccl" in ready and ngpu < 2:
            ready.remove("nccl")
        checks += _launch(ready)
    elif not launch:
        checks.append(Check("launch", INFO, "not tried (--no-launch): whether two ranks meet and "
                            "all-reduce here is unchecked"))
    checks += [_py_spy(), _shm(), _nccl_env()]
    return Checkup(checks)


class Checkup(list):
    """The checks, in order: a list of :class:`Check` that is also a report
    (:mod:`dtlab.reporting`)."""

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self)

    def to_dict(self) -> dict:
        return {"checks": [asdict(c) for c in self], "ok": self.ok}

    def render(self) -> str:
        w = max(len(c.name) for c in self)
        lines = ["dtlab doctor"]
        for c in self:
            lines.append(f"  [{c.status:>4}] {c.name:<{w}}  {c.detail}")
            if c.next_step and c.status in (WARN, FAIL):
                lines.append(f"  {'':>6} {'':<{w}}  -> {c.next_step}")
        bad = [c for c in self if c.status == FAIL]
        lines.append("  all good" if not bad else f"  {len(bad)} problem(s): see -> lines above")
        return "\n".join(lines)


def render(checks: list[Check]) -> str:
    return Checkup(checks).render()


# --- `dtlab doctor` (dtlab/cli.py) -------------------------------------------------------------

def parents() -> list:
    from .flags import json_flag

    return [json_flag()]


def add_arguments(p) -> None:
    p.add_argument("--no-launch", action="store_true", help="skip the live 2-rank all_reduce")
    p.epilog = "exit status: 0 nothing FAILs, 1 something does (a -> line says what to do)"


def run(args):
    checks = diagnose(launch=not args.no_launch)
    return checks, 0 if checks.ok else 1
