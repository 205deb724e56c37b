"""dtlab multinode simulate, for real: torchrun agents in network namespaces (root) or on
127.0.0.1, every fault, and nothing left behind -- no namespace, no /etc/netns entry, no process."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from conftest import assert_no_descendants

from dtlab.multinode import netns
from dtlab.multinode.simulate import render, simulate

ROOT = netns.available() is None
# the rehearsal probes each path's MTU with ping (iputils-ping; .ci/run installs it)
needs_root = pytest.mark.skipif(not ROOT or not shutil.which("ping"),
                                reason=f"netns: {netns.available() or 'no ping (iputils-ping)'}")
FAST = dict(join_timeout=5, pg_timeout=5, iters=10, nbytes=1 << 18)


def _strays(creator: int, timeout=10.0):
    """torchrun agents of ``creator``'s simulation still alive anywhere (a killed parent's are
    re-parented, so they are no longer our descendants; its subnet tells them from those of a
    simulation another test process runs at the same time)."""
    import psutil

    subnet = f"10.213.{10 + creator % 240}."  # as netns.Network numbers its subnet
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if ("dtlab-sim" in cmd or "dtlab.multinode.check" in cmd) and subnet in cmd:
                left.append(cmd[:100])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _mine(name: str) -> bool:
    """A dtlab namespace (or /etc/netns entry) this test process answers for: made by it, by a
    process below it, or by one that is gone -- not by another test process that runs beside it
    (pytest-xdist) and is still making its own."""
    import psutil

    if not name.startswith(netns.PREFIX):
        return False
    pid = int(name[len(netns.PREFIX):].split("-")[0])
    try:
        return pid == os.getpid() or any(p.pid == os.getpid() for p in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return True


def _ours():
    return sorted(n for n in netns.namespaces() if _mine(n))


def _etc():
    return {d for d in os.listdir(netns.ETC) if _mine(d)} if os.path.isdir(netns.ETC) else set()


@pytest.fixture
def clean():
    before, etc = _ours(), _etc()
    yield
    assert _ours() == before
    assert _etc() <= etc
    assert_no_descendants()


@pytest.mark.slow
@needs_root
def test_netns_two_nodes_two_ranks_each(clean):
    r = simulate(2, 2, "netns", iters=10, nbytes=1 << 18)
    assert r["mode"] == "netns" and r["ok"] and r["world_size"] == r["ranks_present"] == 4
    assert [n["ranks"] for n in r["nodes"]] == [[0, 1], [2, 3]]
    assert len({n["address"] for n in r["nodes"]}) == 2
    assert r["latency_us"]["within"] > 0 and r["latency_us"]["across"] > 0
    assert r["bandwidth_GBps"]["within"] > 0 and r["bandwidth_GBps"]["across"] > 0
    assert r["diagnosis"]["failure_class"] == "no_failure"
    json.dumps(r)


def _listeners_while(fn):
    """fn's result, and every (command, address) a descendant listened on while fn ran."""
    import psutil

    seen, done = set(), threading.Event()

    def watch():
        while not done.wait(0.2):
            for p in psutil.Process().children(recursive=True):
                try:
                    seen.update((" ".join(p.cmdline()[1:3]), c.laddr.ip)
                                for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
                except psutil.Error:
                    pass

    t = threading.Thread(target=watch)
    t.start()
    try:
        return fn(), seen
    finally:
        done.set()
        t.join()


@pytest.mark.slow
def test_without_root_auto_falls_back_to_localhost_and_says_so(clean, monkeypatch, capsys,
                                                               tmp_path):
    """And every port the rehearsal listens on is on 127.0.0.1: torch's TCPStore alone would
    listen on every address (::), reachable from other hosts; and nothing is left in $TMPDIR
    (torch elastic's torchelastic_* folders were)."""
    from dtlab.cli import main

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR
    monkeypatch.setattr(netns, "available", lambda: "not root (network namespaces need root)")
    code, listening = _listeners_while(lambda: main(
        ["multinode", "simulate", "--nodes", "2", "--procs-per-node", "1", "--json"]))
    assert code == 0
    assert any(cmd == "-m dtlab.multinode.agent" for cmd, _ in listening), listening
    assert {ip for _, ip in listening} == {"127.0.0.1"}, listening
    r = json.loads(capsys.readouterr().out)
    assert r["mode"] == "localhost" and "not root" in r["note"] and r["ranks_present"] == 2
    assert {n["address"] for n in r["nodes"]} == {"127.0.0.1"}
    assert sorted(n["ranks"] for n in r["nodes"]) == [[0], [1]]
    assert r["diagnosis"]["failure_class"] == "no_failure"
    assert os.listdir(tmp_path) == []


# the network faults' own bounds: blocked_data_ports ends at the store's connect timeout (the
# process group's); mtu_mismatch when node1's kernel gives up (~8 s after the first big message,
# whatever the timeouts), node0's silent rank then stopped after `grace` -- its longer
# pg_timeout only moves the rehearsal's overall limit (join + pg + 30 s), which a start-up on a
# loaded 2-core machine (load average 4) once used up
FASTER = {"blocked_data_ports": dict(pg_timeout=2, grace=1.0),
          "mtu_mismatch": dict(pg_timeout=15, grace=1.0)}


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("fault", ["wrong_master_addr", "wrong_port", "blocked_port",
                                   "missing_node", "wrong_ifname", "slow_link", "mtu_mismatch",
                                   "blocked_data_ports"])
def test_fault_is_bounded_and_diagnosed(fault, clean):
    t0 = time.monotonic()
    r = simulate(2, 1, "netns", fault=fault, **{**FAST, **FASTER.get(fault, {})})
    assert time.monotonic() - t0 < 60
    d = r["diagnosis"]
    assert d["failure_class"] == fault, (d, r["nodes"])
    assert d["summary"] and d["evidence"]
    # every started node's console comes back with the report
    assert set(r["consoles"]) == {n["name"] for n in r["nodes"] if n["started"]}
    if fault == "slow_link":  # measurably slower, by about what alpha-beta predicts
        assert r["ok"] is False and r["ranks_present"] == 2
        assert r["bandwidth_GBps"]["across"] < 0.05  # 100 Mbit/s = 0.0125 GB/s
    else:
        assert r["ranks_present"] == 0
    if fault == "mtu_mismatch":  # the probe saw what the switch port does
        assert [(p["mtu"], p["path_mtu"]) for p in r["paths"]] == [(9000, 1500)]
    elif r["mode"] == "netns":
        assert [(p["mtu"], p["path_mtu"]) for p in r["paths"]] == [(1500, 1500)]


def test_bad_input_is_one_line_and_exit_2(clean, capsys):
    from dtlab.cli import main

    for args in (["--nodes", "0"], ["--mode", "cloud"], ["--fault", "gremlins"],
                 ["--mode", "localhost", "--fault", "blocked_port"], ["--join-timeout", "0"],
                 ["--mode", "localhost", "--fault", "mtu_mismatch"], ["--iperf", "99"],
                 ["--mode", "localhost", "--iperf", "2"], ["--nodes", "1", "--iperf", "2"]):
        assert main(["multinode", "simulate", *args]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("dtlab multinode simulate: ") and err.count("\n") == 1, err


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_killed_mid_run_leaves_nothing(how, clean):
    """SIGTERM: simulate cleans up itself, says so in one line and exits 143 (128 + 15). SIGKILL:
    the reaper ends the agents and their workers and removes the namespaces at once."""
    p = subprocess.Popen([sys.executable, "-m", "dtlab", "multinode", "simulate", "--nodes", "2",
                          "--procs-per-node", "1", "--mode", "netns", "--fault", "missing_node",
                          "--join-timeout", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    mine = f"{netns.PREFIX}{p.pid}-"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(n.startswith(mine) for n in netns.namespaces()):
        time.sleep(0.1)
    time.sleep(3)  # the agent is up and waiting in the rendezvous
    p.send_signal(getattr(signal, how))
    out, err = p.communicate(timeout=30)
    assert _strays(p.pid) == []
    if how == "SIGTERM":
        assert p.returncode == 143 and out == "", (p.returncode, out)
        assert err == "dtlab multinode simulate: stopped by SIGTERM; everything it made is removed\n"
    deadline = time.monotonic() + 10  # the reaper sees its pipe close at once
    while time.monotonic() < deadline and (
            any(n.startswith(mine) for n in netns.namespaces())
            or any(d.startswith(mine) for d in os.listdir(netns.ETC))):
        time.sleep(0.1)
    assert not any(n.startswith(mine) for n in netns.namespaces())
    assert not any(d.startswith(mine) for d in os.listdir(netns.ETC))


def test_simulated_nodes_get_gpus_of_their_own_or_none(monkeypatch):
    """Four ranks on a 2-GPU machine would put node 0's and node 1's LOCAL_RANK 0 both on cuda:0
    (NCCL: "Duplicate GPU detected"): then no node sees a GPU, and the note says why."""
    import torch

    from dtlab.multinode.simulate import gpu_layout

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    envs, note = gpu_layout(2, 2)
    assert envs == [{"CUDA_VISIBLE_DEVICES": ""}] * 2
    assert "need 4 GPUs" in note and "has 2" in note and "gloo" in note
    assert gpu_layout(2, 1) == ([{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}], None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")   # the user's choice of GPUs, split
    assert gpu_layout(2, 1)[0] == [{"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "7"}]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert gpu_layout(2, 2) == ([{}, {}], None)


def test_a_failed_rehearsal_prints_a_line_not_a_traceback():
    from dtlab.multinode.simulate import render, render_pairs

    failed = {"mode": "localhost", "note": None, "fault": None, "world_size": 4,
              "ranks_present": 0, "nodes": [], "latency_us": None, "bandwidth_GBps": None,
              "pairs": [], "seconds": 1.0,
              "diagnosis": {"failure_class": "launch_failed", "summary": "x", "evidence": []}}
    assert render_pairs(failed).startswith("no pair was timed: 0 of 4 ranks")
    assert "None" not in render(failed)


@pytest.mark.gpu
def test_on_two_gpus_one_rank_per_node_is_nccl_and_two_per_node_fall_back_to_gloo(clean):
    import torch

    if torch.cuda.device_count() != 2:
        pytest.skip("needs exactly 2 GPUs")
    one = simulate(2, 1, "auto", iters=10, nbytes=1 << 18)
    assert one["ok"] and one["diagnosis"]["failure_class"] == "no_failure", render(one)
    assert "gloo" not in (one["note"] or "")
    two = simulate(2, 2, "auto", iters=10, nbytes=1 << 18)
    assert two["ok"] and two["ranks_present"] == 4, render(two)
    assert "need 4 GPUs" in two["note"] and not two["problems"].get("duplicate_gpus")
