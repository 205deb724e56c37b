"""03's checks: the recorded ``nvidia-smi topo -m`` matrices under data/topologies/ as the rows a
learner's function takes, ``slowest_pairs``' answer once it is a dict of "kind" and "pairs", a
symmetric machine written from a rule (``sym``), and the machines drawn per grading session
(:mod:`dtlab.course.topologies`) checked against the library's reading of them.

The cases (which recordings, the synthetic machines' links and NIC legends, the rings, the
expected answers) are the test cell's."""

from __future__ import annotations

import os

from ...topology import gpu_rows, load
from ..recorded import data_root


def machine(name: str) -> dict:
    """A recorded matrix under data/topologies/, read by :func:`dtlab.topology.load`."""
    return load(os.path.join(data_root(), "topologies", name))


def rows(name: str) -> dict:
    """The GPU rows of a recorded matrix: ``{"GPU0": {"GPU1": "NV4", "NIC0": "PIX", ...}, ...}``."""
    return gpu_rows(machine(name))


def rows_and_nics(name: str) -> tuple[dict, dict]:
    """A recorded matrix's GPU rows and its NIC legend (``{"NIC0": "mlx5_0", ...}``)."""
    m = machine(name)
    return gpu_rows(m), dict(m["nic_names"])


def sym(n: int, kind_of, nics: dict | None = None) -> dict:
    """A SYNTHETIC machine of ``n`` GPUs: GPUi to GPUj is ``kind_of(i, j)`` (both ways), then
    ``nics`` ({NIC: kind}) on every GPU's row."""
    g = [f"GPU{i}" for i in range(n)]
    links = {a: {b: kind_of(i, j) for j, b in enumerate(g) if b != a} for i, a in enumerate(g)}
    for row in links.values():
        row.update(nics or {})
    return links


# -- slowest_pairs ---------------------------------------------------------------------------
def pairs_asked(mine, links) -> dict:
    """``mine(links)``, once it is a dict of "kind" and "pairs" (plain data back, computed in the
    learner's process)."""
    got = mine(links)
    assert type(got) is dict and set(got) == {"kind", "pairs"}, f"got {got!r}"
    return got


def drawn_pairs(mine, cases) -> None:
    """Each drawn machine of ``cases`` ((links, answer), :func:`dtlab.course.topologies.slowest_pairs_cases`)."""
    for links, want in cases:
        got = pairs_asked(mine, links)
        assert got == want, f"a drawn {len(links)}-GPU machine: got {got}, expected {want}"


# -- nearest_nic -----------------------------------------------------------------------------
def drawn_nics(mine, cases) -> None:
    """Each drawn machine of ``cases`` ((links, NIC legend, answer),
    :func:`dtlab.course.topologies.nearest_nic_cases`)."""
    for links, names, want in cases:
        got = mine(links, names)
        assert got == want, f"a drawn machine (NIC legend {names}): got {got}, expected {want}"


# -- ring_bottleneck -------------------------------------------------------------------------
def ring_asked(mine, links, order) -> dict:
    """``mine(links, order)``, the order as a list (plain data back, computed in the learner's
    process)."""
    return mine(links, list(order))


def drawn_rings(mine, cases) -> None:
    """Each drawn ring of ``cases`` ((links, order, answer),
    :func:`dtlab.course.topologies.ring_bottleneck_cases`)."""
    for links, order, want in cases:
        got = ring_asked(mine, links, order)
        assert got == want, f"the drawn ring {order}: got {got}, expected {want}"
