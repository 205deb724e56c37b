"""``dtlab multinode simulate``: a multi-node torchrun launch rehearsed on one machine.

Contract: :func:`simulate` starts one real torchrun agent per simulated node (c10d rendezvous,
``--max-restarts 0``), each running ``python -m dtlab.multinode.check`` on its ranks, and
returns the check's report with how the nodes were laid out, or -- when the launch fails or a
``fault`` was injected -- the diagnosis of what the consoles say (``"diagnosis"``: the
:class:`~dtlab.multinode.diagnose.Diagnosis`'s ``to_dict()``, JSON like the rest). Modes:

* ``netns`` (root): each node in its own network namespace with its own address
  (:class:`.netns.Network`), its own hostname (a UTS namespace), ``GLOO_SOCKET_IFNAME=eth0``;
  the rendezvous endpoint is node 0's address, so a wrong address, a closed or filtered port and
  a slow link behave as between hosts.
* ``localhost``: every agent on 127.0.0.1 (``lo``), every store it serves listening there only
  (:mod:`.agent` ``--loopback``); what needs separate hosts is refused. ``auto`` picks netns
  when it can and says why not when it cannot.

Each agent is torchrun as :mod:`.agent` runs it (the hosting agent leaves last); the launch
lines in the report are the plain ``torchrun`` lines a real node would run.

Bounded: the rendezvous join and store timeouts (``join_timeout``) and the process group's
timeout (``pg_timeout``) end every fault; after the first agent fails the others get
``grace`` seconds. Everything made -- namespaces, links, qdiscs, rules, processes -- is gone
when it returns, raises, or is interrupted (SIGINT; SIGTERM raises :class:`Terminated` once
all is removed); killed (SIGKILL), its reaper ends the agents and removes the namespaces::

    sudo dtlab multinode simulate --nodes 2 --procs-per-node 2 --json
    sudo dtlab multinode simulate --fault missing_node
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from ..reporting import Data
from ..runtime.agents import Agents
from ..runtime.supervisor import make_run_dir
from . import netns
from .diagnose import Diagnosis, diagnose
from .faults import FAULTS, NEEDS_NETNS, RDZV_PORT, apply

MODES = ("auto", "netns", "localhost")


def check_args(nodes: int, procs_per_node: int, mode: str, fault: str | None,
               join_timeout: float, pg_timeout: float, iperf_seconds: int = 0) -> None:
    """ValueError naming what is wrong, before anything is made."""
    if not 1 <= nodes <= 16:
        raise ValueError(f"--nodes {nodes}: give 1 to 16 simulated nodes.")
    if not 1 <= procs_per_node <= 8 or nodes * procs_per_node > 32:
        raise ValueError(f"--procs-per-node {procs_per_node}: give 1 to 8, at most 32 ranks in "
                         f"all (each is a CPU process on this machine).")
    if mode not in MODES:
        raise ValueError(f"--mode {mode}: give one of {', '.join(MODES)}.")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"--fault {fault}: give one of {', '.join(FAULTS)}.")
    if fault is not None and nodes < 2:
        raise ValueError(f"--fault {fault} needs --nodes 2 or more (it breaks what lies "
                         f"between nodes).")
    if fault in NEEDS_NETNS and mode == "localhost":
        raise ValueError(f"--fault {fault} needs separate network stacks: use --mode netns "
                         f"(as root).")
    if fault in NEEDS_NETNS and mode == "netns" and netns.available():
        raise ValueError(f"--fault {fault}: {netns.available()}; run as root.")
    for name, v in (("--join-timeout", join_timeout), ("--pg-timeout", pg_timeout)):
        if not 2 <= v <= 600:
            raise ValueError(f"{name} {v}: give 2 to 600 seconds.")
    if not 0 <= iperf_seconds <= 60:
        raise ValueError(f"--iperf {iperf_seconds}: give 1 to 60 seconds (0: no iperf3).")
    if iperf_seconds and (mode == "localhost" or netns.available()):
        why = netns.available()
        raise ValueError("--iperf needs separate network stacks: use --mode netns as root"
                         + (f" ({why})." if why else "."))
    if iperf_seconds and nodes < 2:
        raise ValueError("--iperf needs --nodes 2 or more (it measures the link between two).")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during :func:`simulate`; raised once everything it made was removed. A
    KeyboardInterrupt, so that code which stops on Ctrl-C stops on it too."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises :class:`Terminated` here, so the same cleanup runs as for Ctrl-C; a second
    SIGTERM is ignored until that cleanup is done (it would cut it short)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def gpu_layout(nodes: int, per_node: int) -> tuple[list[dict[str, str]], str | None]:
    """Each simulated node's CUDA_VISIBLE_DEVICES, and a note when the ranks run on gloo.

    With a GPU for every rank, node i gets GPUs i*P .. i*P+P-1 of those visible (a real node has
    its own). With fewer, every node sees none and the ranks run on gloo: each node's
    LOCAL_RANK 0 would otherwise take the same cuda:0, which NCCL refuses ("Duplicate GPU
    detected"). No GPU at all: nothing to say."""
    try:
        import torch

        have = torch.cuda.device_count()
    except Exception:  # no torch with CUDA here: CPU ranks
        have = 0
    if have == 0:
        return [{} for _ in range(nodes)], None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",")][:have] if visible else [str(i) for i in range(have)]
    need = nodes * per_node
    if have < need:
        return ([{"CUDA_VISIBLE_DEVICES": ""} for _ in range(nodes)],
                f"{nodes} nodes x {per_node} ranks need {need} GPUs, one each; this machine has "
                f"{have}: the ranks run on gloo (CPU), since NCCL refuses two ranks on one GPU")
    return [{"CUDA_VISIBLE_DEVICES": ",".join(ids[i * per_node:(i + 1) * per_node])}
            for i in range(nodes)], None


def _torchrun_args(n: int, i: int, ppn: int, endpoint: str, is_host: bool, join_timeout: float,
                   local_addr: str, out: str, check_args_: list[str]) -> list[str]:
    """What follows ``torchrun`` on node ``i``: the line a learner types on a real node."""
    t = int(join_timeout)
    return ["--nnodes", str(n), "--node-rank", str(i), "--nproc-per-node", str(ppn),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "dtlab-sim",
            "--rdzv-conf", f"join_timeout={t},read_timeout={t},is_host={int(is_host)}",
            "--local-addr", local_addr, "--max-restarts", "0", "--monitor-interval", "0.2",
            "-m", "dtlab.multinode.check", "--out", out, *check_args_]


def _agent_argv(torchrun_args: list[str], loopback: bool) -> list[str]:
    """torchrun as :mod:`.agent` runs it: its stores on 127.0.0.1 only with ``loopback``, and
    the hosting agent leaving last."""
    return [sys.executable, "-m", "dtlab.multinode.agent", *(["--loopback"] if loopback else []),
            *torchrun_args]


def simulate(nodes: int = 2, procs_per_node: int = 2, mode: str = "auto",
             fault: str | None = None, join_timeout: float = 15, pg_timeout: float = 20,
             iters: int = 30, nbytes: int = 1 << 20, grace: float = 3.0,
             iperf_seconds: int = 0) -> dict:
    """Launch, wait, report, clean up (module docstring). Returns the JSON-ready report.

    In netns mode it also gathers what an engineer would check on each host afterwards: ``tc
    qdisc show`` and, from node 0 to every other node, the path MTU (:func:`.netns.path_mtu`,
    ``ping -M do``); with ``iperf_seconds`` > 0, ``iperf3`` from the last node to node 0 on the
    same links (:mod:`.iperf`, key ``iperf3``: Gbit/s), to set beside the check's busbw."""
    check_args(nodes, procs_per_node, mode, fault, join_timeout, pg_timeout, iperf_seconds)
    note = None
    if mode == "auto":
        why = netns.available()
        mode = "localhost" if why else "netns"
        note = f"network namespaces unavailable ({why}): every node on 127.0.0.1" if why else None
    elif mode == "netns" and netns.available():
        raise ValueError(f"--mode netns: {netns.available()}; use --mode localhost.")
    gpus, gpu_note = gpu_layout(nodes, procs_per_node)
    note = "; ".join(x for x in (note, gpu_note) if x) or None
    t0 = time.monotonic()
    net = netns.Network(nodes) if mode == "netns" else None
    with _sigterm_as_interrupt():
        run_dir = make_run_dir("dtlab-multinode-")
        out = os.path.join(run_dir, "report.json")
        try:
            with (net or contextlib.nullcontext()), Agents(run_dir) as ag:
                for argv in net.undo_commands() if net else []:
                    ag.undo_if_killed(argv)  # should this process be killed: its reaper's to do
                plan, injected, launch = _start(ag, net, nodes, procs_per_node, fault, out, gpus,
                                                join_timeout, pg_timeout, iters, nbytes)
                codes = _wait(ag, join_timeout + pg_timeout + 30, grace)
                consoles = {name: ag.output(name) for name in ag.procs}
                qdiscs = _qdiscs(net) if net else {}
                # without ping there is no probe: the diagnosis reads the consoles alone
                paths = [netns.path_mtu(net, 0, i, wait=PROBE_WAIT) for i in range(1, nodes)
                         ] if net and shutil.which("ping") else None
                measured = _iperf(net, iperf_seconds) if net and iperf_seconds else None
        finally:
            report = _read(out)
            if not os.environ.get("DTLAB_KEEP_RUNS"):
                shutil.rmtree(run_dir, ignore_errors=True)
        diag = diagnose(consoles, codes, report, plan, qdiscs=qdiscs, paths=paths)
        res = _result(mode, note, fault, injected, nodes, procs_per_node, plan, launch, codes,
                      report, diag.to_dict(), time.monotonic() - t0, ag)
        res["paths"], res["qdiscs"], res["plan"] = paths, qdiscs, plan
        if measured is not None:
            res["iperf3"] = measured
    # what each node's console said (its last CONSOLE_LINES lines): the evidence the diagnosis
    # read, for a person to read too
    res["consoles"] = {name: "\n".join(text.splitlines()[-CONSOLE_LINES:])
                       for name, text in consoles.items()}
    return Rehearsal(res)


def _start(ag: Agents, net: netns.Network | None, nodes: int, ppn: int, fault: str | None,
           out: str, gpus: list[dict[str, str]], join_timeout: float, pg_timeout: float,
           iters: int, nbytes: int) -> tuple[list[dict], str | None, dict[str, str]]:
    """Plan the nodes, inject ``fault``, start one agent per node: (plan, what was injected,
    each node's torchrun line)."""
    addresses = net.addresses if net else ["127.0.0.1"] * nodes
    port = RDZV_PORT if net else _free_port()
    tmp = os.path.join(os.path.dirname(out), "tmp")  # torch elastic's own temp folders go with
    os.makedirs(tmp, exist_ok=True)                  # the run folder (they stayed in $TMPDIR)
    base_env = {**os.environ, "OMP_NUM_THREADS": "1", "NCCL_NVLS_ENABLE": "0",
                "PYTHONUNBUFFERED": "1", "TMPDIR": tmp}
    if fault and fault != "slow_link":  # connect attempts, refused or unanswered, logged
        base_env.update(TORCH_CPP_LOG_LEVEL="INFO", TORCH_DISTRIBUTED_DEBUG="DETAIL")
    ifname = netns.IFNAME if net else "lo"
    plan = [{"name": f"node{i}", "address": addresses[i], "ifname": ifname,
             "endpoint": f"{addresses[0]}:{port}", "start": True} for i in range(nodes)]
    injected = apply(fault, plan, net, port) if fault else None
    launch = {}
    check_extra = ["--timeout", str(pg_timeout), "--iters", str(iters), "--bytes", str(nbytes)]
    for i, p in enumerate(plan):
        args = _torchrun_args(nodes, i, ppn, p["endpoint"], i == 0, join_timeout, p["address"],
                              out, check_extra)
        env = {**base_env, "GLOO_SOCKET_IFNAME": p["ifname"], "NCCL_SOCKET_IFNAME": p["ifname"],
               **gpus[i]}
        launch[p["name"]] = f"GLOO_SOCKET_IFNAME={p['ifname']} " + " ".join(["torchrun", *args])
        if not p["start"]:
            continue
        argv = _agent_argv(args, loopback=net is None)
        if net:
            argv = [*net.exec_prefix(i), "unshare", "--uts", "sh", "-c",
                    'hostname "$0" && exec "$@"', net.hostname(i), *argv]
        ag.start(p["name"], argv, env)
    return plan, injected, launch


CONSOLE_LINES = 200
# s a ping probe waits for its echo: a veth answers within a millisecond, so only a lost probe
# waits this long (a late echo taken for lost would invent a black hole: not shorter on a busy
# 2-core machine); on a real network `ping -W 1` is the habit
PROBE_WAIT = 0.5


def _iperf(net: netns.Network, seconds: int) -> dict:
    """iperf3 from the last node to node 0, or why it could not run (one line)."""
    from . import iperf

    why = iperf.available()
    if why:
        return {"error": why}
    try:
        return iperf.iperf(net, 0, net.n - 1, seconds, timeout=seconds + 10)
    except (RuntimeError, TimeoutError, ValueError) as e:  # a broken link breaks iperf3 too
        return {"error": str(e)}


def _wait(ag: Agents, limit: float, grace: float) -> dict:
    """Until every agent exits, ``grace`` s after the first failure, or ``limit`` s."""
    deadline = time.monotonic() + limit
    failed_at = None
    while True:
        codes = ag.poll()
        if all(c is not None for c in codes.values()):
            return codes
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes.values()):
            failed_at = now
        if now >= deadline or (failed_at is not None and now - failed_at >= grace):
            return codes
        time.sleep(0.1)


def _qdiscs(net: netns.Network) -> dict[str, str]:
    """`tc qdisc show` on each node's interface: evidence an engineer would gather per host."""
    out = {}
    for i, ns in enumerate(net.nodes):
        r = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", netns.IFNAME],
                           capture_output=True, text=True, timeout=10)
        out[f"node{i}"] = r.stdout.strip()
    return out


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _result(mode, note, fault, injected, n, ppn, plan, launch, codes, report, diag, secs, ag) -> dict:
    agent_pids = {p.pid: name for name, p in ag.procs.items()}
    by_node: dict[str, list[int]] = {p["name"]: [] for p in plan}
    for r in (report or {}).get("ranks", []):
        name = agent_pids.get(r.get("agent_pid"))
        if name:
            by_node[name].append(r["rank"])
    nodes_ = [{"name": p["name"], "address": p["address"], "ranks": sorted(by_node[p["name"]]),
               "started": p["start"], "exit_code": codes.get(p["name"])} for p in plan]
    rep = report or {}
    return {"mode": mode, "note": note, "world_size": n * ppn,
            "ranks_present": rep.get("ranks_present", 0), "ok": bool(rep.get("ok")) and not fault,
            "nodes": nodes_, "latency_us": rep.get("latency_us"),
            "bandwidth_GBps": rep.get("bandwidth_GBps"), "pairs": rep.get("pairs", []),
            "bytes": rep.get("bytes"),
            "problems": {k: rep[k] for k in ("missing", "duplicate_ranks", "duplicate_gpus",
                                             "bad_local_ranks") if k in rep},
            "fault": fault, "injected": injected, "diagnosis": diag, "launch": launch,
            "seconds": round(secs, 1)}


def rediagnose(res: dict, paths=...) -> Diagnosis:
    """The diagnosis again, from a rehearsal's result as :func:`simulate` returned it (or as
    recorded in ``data/``). ``paths``: the ``ping -M do`` evidence to use, by default the
    result's own; None reads the consoles as an engineer who has not run ping::

        rediagnose(res, paths=None).failure_class   # 'stalled' where res said 'mtu_mismatch'
    """
    codes = {n["name"]: n["exit_code"] for n in res["nodes"] if n["started"]}
    return diagnose(res["consoles"], codes, None if not res["pairs"] else _report_of(res),
                    res["plan"], qdiscs=res.get("qdiscs"),
                    paths=res.get("paths") if paths is ... else paths)


def _report_of(res: dict) -> dict:
    """What :func:`diagnose` reads of the check's report, from the result's own copy."""
    return {"ok": not any(res["problems"].values()), "ranks_present": res["ranks_present"],
            "world_size": res["world_size"], "pairs": res["pairs"], "bytes": res.get("bytes"),
            "bandwidth_GBps": res["bandwidth_GBps"], **res["problems"]}


def beside_iperf(res: dict) -> str:
    """The check's across-node busbw beside iperf3's one stream on the same link, in Gbit/s. On 2
    ranks an all_reduce of S bytes sends S each way over the link in time t, and busbw is S / t
    (2(n-1)/n = 1): the same quantity as one direction's stream rate::

        beside_iperf(simulate(2, 1, "netns", fault="slow_link", iperf_seconds=1))
        # 'busbw across nodes 0.094 Gbit/s (...)   iperf3 node1->node0 0.096 Gbit/s   busbw/iperf3 0.98'
    """
    ip, bw = res.get("iperf3") or {}, (res.get("bandwidth_GBps") or {}).get("across")
    if "Gbps" not in ip or bw is None:
        return (f"nothing to compare: busbw across {bw}, iperf3 "
                f"{ip.get('error', 'not run (iperf_seconds=0)')}")
    return (f"busbw across nodes {bw * 8:8.3f} Gbit/s ({bw:.4f} GB/s, all_reduce of "
            f"{res.get('bytes') or 0:,} B)   iperf3 {ip['client']}->{ip['server']} "
            f"{ip['Gbps']:8.3f} Gbit/s   busbw/iperf3 {bw * 8 / ip['Gbps']:.2f}")


def render_pairs(res: dict) -> str:
    """The timed pairs of a rehearsal as a table, and across/within bandwidth; for a rehearsal
    that timed none (a failed launch, a broken world), one line saying so."""
    if not res.get("pairs"):
        return (f"no pair was timed: {res['ranks_present']} of {res['world_size']} ranks, "
                f"diagnosis {res['diagnosis']['failure_class']} (see render(res))")
    lines = [f"{'pair':<7} {'ranks':<7} {'nodes':<6} {'latency us':>10} {'GB/s':>8}"]
    for p in res["pairs"]:
        lines.append(f"{p['kind']:<7} {str(p['ranks']):<7} {str(p['nodes']):<6} "
                     f"{p['latency_us']:>10.1f} {p['bandwidth_GBps']:>8.4f}")
    bw = res["bandwidth_GBps"] or {}
    if bw.get("within") and bw.get("across") is not None:
        lines.append(f"across / within bandwidth: {bw['across'] / bw['within']:.2f}")
    return "\n".join(lines)


class Rehearsal(Data):
    """What :func:`simulate` returns: plain data (a dict), and :func:`render` as its text."""

    def render(self) -> str:
        return render(self)


def render(res: dict) -> str:
    lines = [f"mode: {res['mode']}" + (f" ({res['note']})" if res["note"] else "")]
    if res["fault"]:
        lines.append(f"fault: {res['fault']} -- {res['injected']}")
    lines.append(f"ranks present: {res['ranks_present']} of {res['world_size']}")
    for nd in res["nodes"]:
        state = "never started" if not nd["started"] else f"exit {nd['exit_code']}"
        lines.append(f"  {nd['name']:<6} {nd['address']:<15} ranks {nd['ranks']}  ({state})")
    if res["latency_us"]:
        for k in ("within", "across"):
            lat, bw = res["latency_us"].get(k), res["bandwidth_GBps"].get(k)
            if lat is not None and bw is not None:
                lines.append(f"  {k:<6} node: latency {lat:8.1f} us   busbw {bw:8.4f} GB/s")
    d = res["diagnosis"]
    ip = res.get("iperf3")
    if ip:
        lines.append(f"  iperf3 {ip['client']} -> {ip['server']}: {ip['Gbps']:.3f} Gbit/s" if "Gbps"
                     in ip else f"  iperf3: {ip['error']}")
    lines.append(f"diagnosis: {d['failure_class']} -- {d['summary']}")
    for e in d["evidence"]:
        lines.append(f"  [{e['file']}] {e['finding']}")
    lines.append(f"({res['seconds']} s; everything it made is removed)")
    return "\n".join(lines)
