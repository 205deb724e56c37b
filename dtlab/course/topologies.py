"""03's hidden machines, drawn per grading session: made-up ``nvidia-smi topo -m`` rows, and what
:mod:`dtlab.topology` says of them.

Fixed hidden matrices are learnt from feedback (an error names the case it failed) and answered
by a table next time (the third red team's A4). Drawn with the session's generator
(:func:`course.rng`), every student of one grading meets the same machines and no table of an
earlier session's answers applies. Each case is plain data -- the rows a learner's function takes
(``{"GPU0": {"GPU1": "NV4", "NIC0": "PIX", ...}, ...}``) and the answer -- and the answer comes
from the library's own reading (:func:`dtlab.topology.slowest_pairs`, ``nearest_nics``,
``ring_bottleneck``), the one the visible tests check against recorded machines::

    for links, want in topologies.slowest_pairs_cases(course.rng()):
        assert mine(links) == want
"""

from __future__ import annotations

import random

from ..topology.matrix import link_order
from ..topology.predict import nearest_nics, ring_bottleneck, slowest_pairs

NVLINKS = ["NV1", "NV2", "NV4", "NV6", "NV8", "NV12", "NV18"]
PCIE = ["PIX", "PXB", "PHB", "NODE", "SYS"]
NIC_NAMES = ["mlx5_{}", "ib{}", "rdma{}", "bnxt_re{}", "efa{}", "hsn{}"]


def _gpus(n: int) -> list[str]:
    return [f"GPU{i}" for i in range(n)]


def _topo(gpus: list[str], nics: list[str], links: dict, names: dict | None = None) -> dict:
    return {"gpus": gpus, "nics": nics, "links": links, "nic_names": names or {}}


def _rows(topo: dict) -> dict[str, dict[str, str]]:
    cols = topo["gpus"] + topo["nics"]
    return {g: {c: topo["links"].get((g, c)) or topo["links"][(c, g)] for c in cols if c != g}
            for g in topo["gpus"]}


def _machine(rng: random.Random, n: int, nics: int, kinds: list[str]) -> dict:
    """``n`` GPUs whose pairs take kinds from ``kinds``; ``nics`` NICs at a PCIe distance."""
    gpus, nic = _gpus(n), [f"NIC{i}" for i in range(nics)]
    links = {(a, b): rng.choice(kinds) for i, a in enumerate(gpus) for b in gpus[i + 1:]}
    links.update({(g, c): rng.choice(PCIE) for g in gpus for c in nic})
    return _topo(gpus, nic, links)


def slowest_pairs_cases(rng: random.Random, k: int = 4) -> list[tuple[dict, dict]]:
    """``k`` machines: NVLink only (counts differ), PCIe only, mixed, and one with more than ten
    GPUs (GPU10 sorts after GPU9); NIC columns that must not count."""
    out = []
    for i in range(k):
        n = rng.randint(11, 13) if i == k - 1 else rng.randint(3, 8)
        kinds = sorted([rng.sample(NVLINKS, 3), rng.sample(PCIE, 3),
                        rng.sample(NVLINKS, 2) + rng.sample(PCIE, 2)][i % 3], key=link_order)
        # the worst kind on a few pairs only, so that its pairs are a list worth getting right
        topo = _machine(rng, n, rng.randint(0, 2), kinds[:-1] or kinds)
        pairs = list(topo["links"])
        gpu_pairs = [p for p in pairs if p[1].startswith("GPU")]
        worst = rng.sample(gpu_pairs, rng.randint(1, min(3, len(gpu_pairs))))
        if n > 10:  # one worst pair sorts wrong as text: GPU2 before GPU10
            worst[0] = (f"GPU{rng.randint(2, 9)}", f"GPU{rng.randint(10, n - 1)}")
        for p in worst:
            topo["links"][p] = kinds[-1]
        want = slowest_pairs(topo)
        out.append((_rows(topo), {"kind": want["kind"], "pairs": want["pairs"]}))
    return out


def nearest_nic_cases(rng: random.Random, k: int = 3) -> list[tuple[dict, dict, dict]]:
    """``k`` machines with NICs whose legend order is not their names' order, ties (the legend's
    order decides), and a GPU whose best path is SYS: ``(links, nic_names, answer)``."""
    out = []
    for _ in range(k):
        gpus, m = _gpus(rng.randint(2, 6)), rng.randint(2, 5)
        nic = [f"NIC{i}" for i in range(m)]
        rng.shuffle(nic)  # the legend's order
        style = rng.choice(NIC_NAMES)
        names = dict(zip(nic, (style.format(j) for j in rng.sample(range(10), m))))
        links = {(a, b): rng.choice(NVLINKS) for i, a in enumerate(gpus) for b in gpus[i + 1:]}
        for g in gpus:
            row = rng.sample(PCIE, 2)  # two kinds only: ties are common
            links.update({(g, c): rng.choice(row) for c in nic})
        links.update({(gpus[-1], c): "SYS" for c in nic})
        topo = _topo(gpus, nic, links, names)
        want = {g: v["name"] for g, v in nearest_nics(topo).items()}
        out.append((_rows(topo), names, want))
    return out


def ring_bottleneck_cases(rng: random.Random, k: int = 4) -> list[tuple[dict, list, dict]]:
    """``k`` rings over a drawn subset of a machine's GPUs in a drawn order (a 2-GPU ring among
    them): ``(links, order, answer)``; the worst hop is sometimes the closing one."""
    out = []
    for i in range(k):
        topo = _machine(rng, rng.randint(3, 8), 0, rng.sample(NVLINKS, 2) + rng.sample(PCIE, 2))
        order = rng.sample(topo["gpus"], 2 if i == 0 else rng.randint(3, len(topo["gpus"])))
        if i == 1:  # the closing hop is the only worst one
            worst = max(PCIE, key=PCIE.index)
            for a, b in zip(order, order[1:]):
                key = (a, b) if (a, b) in topo["links"] else (b, a)
                if topo["links"][key] == worst:
                    topo["links"][key] = "PIX"
            key = (order[-1], order[0]) if (order[-1], order[0]) in topo["links"] \
                else (order[0], order[-1])
            topo["links"][key] = worst
        want = ring_bottleneck(topo, order)
        out.append((_rows(topo), order, {"hop": want["hop"], "kind": want["kind"]}))
    return out
