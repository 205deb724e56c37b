"""04's checks: rank tables for ``check_world`` (a row builder, a generator of tables with random
mistakes, the library's own answer to compare with), the renamed consoles ``name_fault`` is
graded on, and ``ibstat`` text for ``ib_port_problems`` (a host's adapters and ports written out,
some of them faulty, with the ports a right answer names).

The cases (the tables, consoles and faults written out by hand, the seeds of generated ones) are
the test cell's."""

from __future__ import annotations

from ...multinode import check_world
from .. import disguise

KEYS = ("missing", "duplicate_gpus", "bad_local_ranks")
FAULTS = {"wrong_master_addr", "wrong_port", "blocked_port", "missing_node", "wrong_ifname"}


# -- check_world -----------------------------------------------------------------------------
def asked(mine, table) -> dict:
    """``mine(table)``, once it is a dict of :data:`KEYS` (plain data back, computed in the
    learner's process)."""
    got = mine(table)
    assert type(got) is dict and set(got) == set(KEYS), f"return a dict with the keys {KEYS}, got {got!r}"
    return got


def world_checked(mine, table, what) -> None:
    """``mine(table)`` is what :func:`dtlab.multinode.check_world` finds."""
    want = {k: check_world(table)[k] for k in KEYS}
    got = asked(mine, table)
    assert got == want, f"{what}: expected {want}, got {got}"


def host_row(rank, node, local, per, world, host, uuid, bus) -> dict:
    """A rank table's row: an A100 of ``uuid`` at ``bus`` (no GPU when ``bus`` is None)."""
    g = None if bus is None else {"name": "A100", "uuid": uuid, "bus_id": bus}
    return {"rank": rank, "world_size": world, "node": node, "local_rank": local,
            "local_world_size": per, "host": host, "gpu": g}


def generated_table(rng) -> list[dict]:
    """A table drawn from ``rng``: 2-4 nodes of 2, 4 or 8 GPUs (with UUIDs or not), up to three
    random mistakes (a rank that never reported, a rank on its neighbour's GPU with its local
    rank, a local rank out of range), rows shuffled."""
    n, per = rng.randint(2, 4), rng.choice([2, 4, 8])
    uuids = rng.random() < 0.7
    t = [host_row(r, r // per, r % per, per, n * per, f"node-{r // per:02d}",
                  f"GPU-{rng.getrandbits(32):08x}" if uuids else "",
                  f"0000:{0x10 + r % per:02x}:00.0") for r in range(n * per)]
    for _ in range(rng.randint(0, 3)):
        kind, i = rng.randrange(3), rng.randrange(len(t))
        if kind == 0 and len(t) > 1:    # a rank that never reported
            t.pop(i)
        elif kind == 1:                 # a rank on its neighbour's GPU, with its local rank
            j = max(0, i - 1) if i % per else min(len(t) - 1, i + 1)
            if t[j]["node"] == t[i]["node"]:
                t[i] = dict(t[i], local_rank=t[j]["local_rank"], gpu=dict(t[j]["gpu"]))
        else:                           # a local rank out of range
            t[i] = dict(t[i], local_rank=per + rng.randrange(2))
    rng.shuffle(t)
    return t


# -- name_fault ------------------------------------------------------------------------------
def fault_named(mine, text: str, fault: str) -> None:
    """``mine(text)`` names ``fault``, the fault of the recorded consoles ``text`` (shown)."""
    got = mine(text)
    assert got in FAULTS, f"name_fault must return one of {sorted(FAULTS)}, got {got!r}"
    assert got == fault, f"the {fault} consoles: got {got!r}"


def hidden_consoles(mine, cases, rng) -> None:
    """Each (console, fault) of ``cases``, its addresses, ports and hosts renamed with ``rng``
    (:func:`dtlab.course.disguise.console`): the feedback names a case by its number only,
    never its answer."""
    for k, (text, want) in enumerate(cases, 1):
        got = mine(disguise.console(text, rng))
        assert got == want, f"hidden console {k} of {len(cases)}: got {got!r}, which is not its fault"


# -- ib_port_problems ------------------------------------------------------------------------
def ports_checked(mine, text: str, rate, want, what) -> None:
    """``mine(text, rate)`` names the ports ``want``, those not ready."""
    got = mine(text, rate)  # computed in your process
    ok = isinstance(got, (list, tuple)) and [list(p) for p in got] == want
    assert ok, f"{what}, expected rate {rate}: the ports not ready are {want}; you said {got!r}"
    print(f"ok: {what}")


def ibstat(cards, indent: str, want_rate, rng, cut: bool = False) -> tuple[str, list]:
    """ibstat's text for cards [(name, [(state, physical, rate), ...])] (GUIDs, LIDs, firmware
    drawn from ``rng``), and the ports not ready; ``cut``: the text stops after the last port's
    Rate line (an excerpt)."""
    lines, bad = [], []
    for name, ports in cards:
        guid = f"0x{rng.getrandbits(64):016x}"
        lines += [f"CA '{name}'", f"{indent}CA type: MT{rng.choice([4123, 4125, 4129])}",
                  f"{indent}Number of ports: {len(ports)}", f"{indent}Firmware version: 2{rng.randint(0, 8)}.{rng.randint(30, 43)}.{rng.randint(1000, 3000)}",
                  f"{indent}Hardware version: 0", f"{indent}Node GUID: {guid}", f"{indent}System image GUID: {guid}"]
        for i, (state, phys, rate) in enumerate(ports, 1):
            lid = 65535 if state == "Down" else 0 if state == "Initializing" else rng.randint(1, 4000)
            lines += [f"{indent}Port {i}:", f"{indent * 2}State: {state}", f"{indent * 2}Physical state: {phys}",
                      f"{indent * 2}Rate: {rate}", f"{indent * 2}Base lid: {lid}", f"{indent * 2}LMC: 0",
                      f"{indent * 2}SM lid: {rng.randint(1, 50)}", f"{indent * 2}Capability mask: 0xa651e848",
                      f"{indent * 2}Port GUID: 0x{rng.getrandbits(64):016x}", f"{indent * 2}Link layer: InfiniBand"]
            if (state, phys) != ("Active", "LinkUp") or rate < want_rate:
                bad.append([name, i])
    if cut:
        lines = lines[:len(lines) - 6]
    return "\n".join(lines) + "\n", sorted(bad)


def indent(rng) -> str:
    """ibstat's indentation, as hosts and excerpts differ in it."""
    return rng.choice(["\t", "  ", "    ", "        "])


def faulty_host(rng, want_rate, faults) -> tuple[str, list]:
    """:func:`ibstat` of 3-12 healthy one-port adapters at ``want_rate``, each of ``faults``
    (state, physical, rate) a port of its own added to a drawn adapter."""
    cards = [(f"mlx5_{i}", [("Active", "LinkUp", want_rate)]) for i in range(rng.randint(3, 12))]
    for fault in faults:  # each in a port of its own
        card = rng.randrange(len(cards))
        cards[card] = (cards[card][0], cards[card][1] + [fault])
        rng.shuffle(cards[card][1])
    return ibstat(cards, indent(rng), want_rate, rng)


def among_healthy(rng, card, rate, cut: bool = False) -> tuple[str, list]:
    """:func:`ibstat` of 1-3 healthy one-port adapters at ``rate`` in a drawn order, then ``card``."""
    cards = [(f"mlx5_{i}", [("Active", "LinkUp", rate)]) for i in range(rng.randint(1, 3))]
    rng.shuffle(cards)
    cards.append(card)
    return ibstat(cards, indent(rng), rate, rng, cut=cut)
