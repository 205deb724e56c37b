"""dtlab doctor and the topology reader."""

import json
import os

import pytest

from dtlab import doctor
from dtlab.cli import main
from dtlab.topology import link_kind, parse_topo_matrix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_real_h200_topology_matrix():
    m = parse_topo_matrix(open(os.path.join(ROOT, "data/h200x2-nccl-logs/nvidia-smi-topo.txt")).read())
    assert m["devices"] == ["GPU0", "GPU1"]
    assert m["links"][("GPU0", "GPU1")] == "NV18" and link_kind("NV18") == "NV"
    assert m["affinity"]["GPU0"]["CPU Affinity"] == "0-31"


def test_not_a_topology_matrix():
    with pytest.raises(ValueError, match="nvidia-smi topo"):
        parse_topo_matrix("hello\nworld\n")


def test_doctor_json_without_launch(capsys):
    assert main(["doctor", "--json", "--no-launch"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["checks"]]
    assert {"python", "torch", "gloo", "py-spy", "/dev/shm"} <= set(names) and out["ok"]


def test_doctor_live_launch(no_orphans):
    checks = {c.name: c for c in doctor.diagnose(launch=True)}
    assert checks["launch gloo"].status == doctor.OK, checks["launch gloo"].detail
    text = doctor.render(list(checks.values()))
    assert "launch gloo" in text and "all good" in text
