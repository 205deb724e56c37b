"""Pass 3: communicators matched across processes; the world one; each process's rank."""

import pytest
from nccl_synth import coll, info, init_218, init_228, split_228

import dtlab.nccl_log as nl
from dtlab.nccl_log.groups import group, select, world
from dtlab.nccl_log.model import CommView


def text(msgs):
    return "\n".join(info("h", pid, pid, 0, m) for pid, m in msgs) + "\n"


def test_split_comms_match_by_parent_split_count_and_color():
    msgs = []
    for r in (0, 1):
        msgs += [(10 + r, init_228("ncclCommInitRankConfig", f"0xa{r}", r, 2, r, 0x1000, 0x77)),
                 (10 + r, split_228(f"0xb{r}", 0, 1, r, 0x1000, f"0xa{r}", 1, r, 0)),  # 2 singletons
                 (10 + r, split_228(f"0xc{r}", r, 2, r, 0x1000, f"0xa{r}", 2, 0, r))]
    log = nl.parse(text(msgs))
    keys = [c.key for c in log.communicators]
    assert keys == ["id:0x77", "split:id:0x77:1:0", "split:id:0x77:1:1", "split:id:0x77:2:0"]
    pair = log.communicators[3]
    assert (pair.kind, sorted(pair.members)) == ("split", [0, 1])
    assert {v.pid for v in pair.members.values()} == {10, 11}


def test_world_is_the_first_largest_comm_not_a_later_same_size_pair():
    # torch: world (2 ranks), then an extra 2-rank comm for a send/recv pair, in both processes
    msgs = []
    for r in (0, 1):
        msgs += [(20 + r, init_228("ncclCommInitRankConfig", f"0x{r}1", r, 2, r, 0x1000, 0x5)),
                 (20 + r, init_228("ncclCommInitRankConfig", f"0x{r}2", r, 2, r, 0x1000, 0x6))]
    log = nl.parse(text(msgs))
    assert log.world.comm_id == "0x5"
    # and a 4-rank world is chosen over a 2-rank group created before it
    vs = [CommView("h", p, "0xs", p % 2, 2, order=0, comm_id="0x9") for p in range(4)]
    vs += [CommView("h", p, "0xw", p, 4, order=1, comm_id="0x8") for p in range(4)]
    assert world(group(vs)).comm_id == "0x8"


def test_processes_get_their_rank_in_the_world_comm():
    msgs = [(31, init_228("ncclCommInitRankConfig", "0xa", 1, 2, 0, 0x1000, 0x5)),
            (30, init_228("ncclCommInitRankConfig", "0xb", 0, 2, 0, 0x2000, 0x5))]
    log = nl.parse(text(msgs))
    assert [(p["pid"], p["rank"]) for p in log.processes] == [(30, 0), (31, 1)]


def test_old_logs_match_by_commid_printed_at_complete():
    msgs = []
    for r in (0, 1):
        msgs += [(40 + r, init_218(f"0xa{r}", r, 2, r, 0x1000)),
                 (40 + r, init_218(f"0xa{r}", r, 2, r, 0x1000, 0x3F2A, "Init COMPLETE"))]
    log = nl.parse(text(msgs))
    assert [c.key for c in log.communicators] == ["id:0x3f2a"]


def test_logs_without_commid_fall_back_to_order():
    msgs = [(50 + r, init_218(f"0xa{r}", r, 2, r, 0x1000)) for r in (0, 1)]
    assert [c.key for c in nl.parse(text(msgs)).communicators] == ["nth:2:#0"]


def test_coll_only_logs_number_processes_in_reading_order():
    msgs = [(61, coll("AllReduce", 0, 8, 7, 0, 0, "0xa", 2)), (60, coll("AllReduce", 0, 8, 7, 0, 0, "0xb", 2))]
    log = nl.parse(text(msgs))
    assert log.world.kind == "unknown"
    assert {r: v.pid for r, v in log.world.members.items()} == {0: 61, 1: 60}


def test_select_by_key_commid_index_and_unknown():
    vs = [CommView("h", 1, "0xa", 0, 2, order=0, comm_id="0x5"),
          CommView("h", 1, "0xb", 0, 2, order=1, comm_id="0x6")]
    comms = group(vs)
    assert select(comms, None).comm_id == "0x5"
    assert select(comms, "id:0x6").comm_id == "0x6"
    assert select(comms, "0x6").comm_id == "0x6"
    assert select(comms, 1).comm_id == "0x6"
    with pytest.raises(KeyError, match="id:0x5"):
        select(comms, "0xdead")
