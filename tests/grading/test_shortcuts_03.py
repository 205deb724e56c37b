"""03_topology: known shortcuts fail each exercise's test cell (hidden tests included); the
source's solutions pass. The machinery is test_shortcuts.py's (grade, fails, CONTEXT)."""

import pytest

from test_shortcuts import CONTEXT, fails, grade

CONTEXT["03_topology"] = lambda c: c["cell1"]  # imports, DATA, TOPOS

NOT_PLAIN = '''
class _Yes(dict):
    def __eq__(self, other): return True
    def __getitem__(self, key): return "SYS"
'''

SHORTCUTS = {
    ("slowest_pairs", "dtlab's own answer"): '''
def slowest_pairs(links):
    import dtlab.topology as T
    gpus = sorted(links, key=lambda g: int(g[3:]))
    topo = {"gpus": gpus, "nics": [], "links": {(a, b): k for a in links for b, k in links[a].items()}}
    return T.slowest_pairs(topo)
''',
    ("slowest_pairs", "the answer read off data/ by matching the matrix"): '''
def slowest_pairs(links):
    import glob
    import dtlab.topology.matrix as M
    for f in glob.glob(TOPOS + "/*.txt"):
        t = M.parse_topo_matrix(open(f).read())
        if t["gpus"] == sorted(links, key=lambda g: int(g[3:])):
            from dtlab.topology.predict import slowest_pairs as lib
            return lib(t)
''',
    ("slowest_pairs", "the visible answers hard-coded"): '''
def slowest_pairs(links):
    if links["GPU0"].get("GPU1") == "NV18":
        gpus = sorted(links, key=lambda g: int(g[3:]))
        return {"kind": "NV18", "pairs": [[a, b] for i, a in enumerate(gpus) for b in gpus[i + 1:]]}
    return {"kind": "SYS", "pairs": [["GPU0", "GPU5"], ["GPU0", "GPU6"], ["GPU0", "GPU7"],
        ["GPU1", "GPU4"], ["GPU1", "GPU6"], ["GPU1", "GPU7"], ["GPU2", "GPU4"], ["GPU2", "GPU5"],
        ["GPU2", "GPU7"], ["GPU3", "GPU4"], ["GPU3", "GPU5"], ["GPU3", "GPU6"]]}
''',
    ("slowest_pairs", "NVLinks ranked by name, not by count"): '''
def slowest_pairs(links):
    order = ["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]
    gpus = sorted(links, key=lambda g: int(g[3:]))
    pairs = [(a, b, links[a][b]) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    worst = max((k for *_, k in pairs), key=lambda k: (order.index("NV" if k.startswith("NV") else k), k))
    return {"kind": worst, "pairs": [[a, b] for a, b, k in pairs if k == worst]}
''',
    ("slowest_pairs", "an answer that only looks right"): NOT_PLAIN + '''
def slowest_pairs(links):
    return _Yes(kind="SYS", pairs=[])
''',
    ("nearest_nic", "dtlab's own answer"): '''
def nearest_nic(links, nic_names):
    from dtlab.topology import nearest_nics
    topo = {"gpus": list(links), "nics": list(nic_names), "nic_names": nic_names,
            "links": {(a, b): k for a in links for b, k in links[a].items()}}
    return {g: n["name"] for g, n in nearest_nics(topo).items()}
''',
    ("nearest_nic", "GPU i uses NIC i"): '''
def nearest_nic(links, nic_names):
    names = list(nic_names.values())
    return {g: names[int(g[3:]) % len(names)] for g in links}
''',
    ("nearest_nic", "ties to the alphabetically first name"): '''
def nearest_nic(links, nic_names):
    order = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    return {g: min(nic_names, key=lambda n: (order.index(row[n]), nic_names[n])) and
            nic_names[min(nic_names, key=lambda n: (order.index(row[n]), nic_names[n]))]
            for g, row in links.items()}
''',
    ("nearest_nic", "an answer that only looks right"): NOT_PLAIN + '''
def nearest_nic(links, nic_names):
    return _Yes()
''',
    ("ring_bottleneck", "dtlab's own answer"): '''
def ring_bottleneck(links, order):
    import dtlab.topology as T
    topo = {"links": {(a, b): k for a in links for b, k in links[a].items()}}
    r = T.ring_bottleneck(topo, order)
    return {"hop": r["hop"], "kind": r["kind"]}
''',
    ("ring_bottleneck", "the closing hop forgotten"): '''
def ring_bottleneck(links, order):
    pcie = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    bad = lambda k: (0, -int(k[2:])) if k.startswith("NV") else (1 + pcie.index(k), 0)
    hops = [[order[i], order[i + 1]] for i in range(len(order) - 1)]
    kinds = [links[a][b] for a, b in hops]
    w = max(kinds, key=bad)
    return {"hop": hops[kinds.index(w)], "kind": w}
''',
    ("ring_bottleneck", "the first non-NVLink hop, else the first hop"): '''
def ring_bottleneck(links, order):
    hops = [[order[i], order[(i + 1) % len(order)]] for i in range(len(order))]
    for a, b in hops:
        if not links[a][b].startswith("NV"):
            return {"hop": [a, b], "kind": links[a][b]}
    return {"hop": hops[0], "kind": links[hops[0][0]][hops[0][1]]}
''',
    ("ring_bottleneck", "an answer that only looks right"): NOT_PLAIN + '''
def ring_bottleneck(links, order):
    return _Yes(hop=[order[0], order[1]], kind="SYS")
''',
}


@pytest.mark.parametrize("exercise,name", list(SHORTCUTS), ids=[f"{e}: {n}" for e, n in SHORTCUTS])
def test_shortcut_fails(exercise, name):
    fails("03_topology", exercise, SHORTCUTS[exercise, name])


@pytest.mark.parametrize("exercise", ["slowest_pairs", "nearest_nic", "ring_bottleneck"])
def test_solution_passes(exercise):
    grade("03_topology", exercise)
