"""dtlab multinode script: the generated torchrun lines and the sbatch script, run for real on
this machine (2 nodes x 1 rank on 127.0.0.1; srun and scontrol are stand-ins that set SLURM's
per-node variables and start the command once per node)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import assert_no_descendants

from dtlab.multinode.script import sbatch, torchrun_lines

BIN = os.path.dirname(sys.executable)  # the venv's torchrun


def _env(tmp_path, extra_path=""):
    return {**os.environ, "PATH": f"{extra_path}{BIN}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo"}


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_lines_run(tmp_path):
    out = tmp_path / "report.json"
    lines = torchrun_lines(2, 1, entry=f"-m dtlab.multinode.check --iters 5 --bytes 4096 "
                           f"--out {out}", master="127.0.0.1", port=_free_port())
    assert all("--rdzv-backend c10d" in ln and f"--node-rank {i}" in ln
               for i, ln in enumerate(lines))
    procs = [subprocess.Popen(["bash", "-c", ln], env=_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True) for ln in lines]
    try:
        codes = [p.wait(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert codes == [0, 0], [p.stdout.read()[-2000:] for p in procs]
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["ranks_present"] == 2 and len(rep["nodes"]) == 2
    assert_no_descendants()


FAKE_SRUN = """#!/bin/bash
# stand-in for srun in a 2-node allocation: the command once per node, with that node's variables
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((i = 0; i < SLURM_NNODES; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURMD_NODENAME=node$i "$@" &
  pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done; exit $rc
"""


@pytest.mark.slow
def test_sbatch_script_runs_under_a_stand_in_allocation(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text(FAKE_SRUN)
    (fake / "scontrol").write_text("#!/bin/bash\necho 127.0.0.1\n")  # show hostnames NODELIST
    for f in fake.iterdir():
        f.chmod(0o755)
    out = tmp_path / "report.json"
    text = sbatch(2, 1, entry=f"-m dtlab.multinode.check --iters 5 --bytes 4096 --out {out}",
                  port=_free_port())
    assert "#SBATCH --nodes=2" in text and "'torchrun" in text
    (tmp_path / "job.sh").write_text(text)
    env = {**_env(tmp_path, f"{fake}:"), "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "node[0-1]"}
    r = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["ranks_present"] == 2
    assert_no_descendants()


def test_script_cli_and_bad_input():
    ok = subprocess.run([sys.executable, "-m", "dtlab", "multinode", "script", "--nodes", "3",
                         "--gpus-per-node", "8", "--json"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and len(json.loads(ok.stdout)["lines"]) == 3
    # NVLS is NCCL's to choose on a real cluster; --no-nvls switches it off, in both forms
    assert not any("NCCL_NVLS_ENABLE" in ln for ln in json.loads(ok.stdout)["lines"])
    off = subprocess.run([sys.executable, "-m", "dtlab", "multinode", "script", "--nodes", "2",
                          "--gpus-per-node", "8", "--no-nvls", "--json"], capture_output=True,
                         text=True, timeout=60)
    assert all(ln.startswith("NCCL_NVLS_ENABLE=0 torchrun ") for ln in json.loads(off.stdout)["lines"])
    assert "NCCL_NVLS_ENABLE" not in sbatch(2, 8)
    assert "\nexport NCCL_NVLS_ENABLE=0 " in sbatch(2, 8, nvls=False)
    bad = subprocess.run([sys.executable, "-m", "dtlab", "multinode", "script", "--nodes", "2",
                          "--gpus-per-node", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("dtlab multinode script: --gpus-per-node 0")


@pytest.mark.parametrize("argv, start", [
    (["--nodes", "x"], "--nodes 'x' is not a whole number"),
    (["--port", "0"], "--port 0 must be a whole number"),
    (["--ifname", "a b;rm"], "--ifname 'a b;rm' is not a network interface name"),
    (["--ifname", "a" * 16], "--ifname "),
    (["--master", ""], "--master '': give node 0's hostname"),
    (["--master", "a b"], "--master 'a b': give node 0's hostname"),
    (["--master", "h;rm"], "--master 'h;rm': "),
    (["--slurm", "--master", "node0"], "--master 'node0' with --slurm: the sbatch script derives"),
])
def test_script_refuses_bad_flags_in_one_line(argv, start, capsys):
    from dtlab.cli import main

    assert main(["multinode", "script", "--nodes", "2", "--gpus-per-node", "8", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("dtlab multinode script: " + start), err


@pytest.mark.parametrize("master, endpoint", [("$MASTER_ADDR", "$MASTER_ADDR:29400"),
                                              ("${HEAD}", "${HEAD}:29400"),
                                              ("node-0.cluster", "node-0.cluster:29400"),
                                              ("10.0.0.1", "10.0.0.1:29400"),
                                              ("fe80::1", "[fe80::1]:29400"),
                                              ("[fe80::1]", "[fe80::1]:29400")])
def test_master_may_be_a_host_an_address_or_a_variable(master, endpoint):
    line = torchrun_lines(2, 8, master=master, ifname="enp1s0f0.100")[0]
    assert f"--rdzv-endpoint {endpoint} " in line
    assert line.startswith("GLOO_SOCKET_IFNAME=enp1s0f0.100 NCCL_SOCKET_IFNAME=enp1s0f0.100 ")


def test_the_library_refuses_what_the_cli_does():
    with pytest.raises(ValueError, match="--ifname"):
        sbatch(2, 8, ifname="eth0 x")
    with pytest.raises(ValueError, match="--master"):
        torchrun_lines(2, 8, master="")


@pytest.mark.parametrize("sub", ["script", "simulate"])
def test_subcommand_help_has_a_description(sub, capsys):
    from dtlab.cli import main

    assert main(["multinode", sub, "--help"]) == 0
    out = capsys.readouterr().out
    first = out.split("\n\n")[1]  # after the usage block
    assert not first.startswith("options:") and not first.startswith("positional"), out
    if sub == "simulate":
        assert "exit status: 0" in out and "2 bad input" in out
