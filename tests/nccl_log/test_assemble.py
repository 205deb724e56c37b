"""Pass 2: lines that name no communicator go to the right one."""

from nccl_synth import algo_228, coll, info, init_228, split_228, timings

from dtlab.nccl_log.assemble import assemble


def run(msgs):
    """msgs: (pid, tid, message) -> Assembly."""
    return assemble(("t", i, info("h", pid, tid, 0, m)) for i, (pid, tid, m) in enumerate(msgs, 1))


START = init_228("ncclCommInitRankConfig", "0xa", 0, 2, 0, 0x18000, 0x11)
DONE = init_228("ncclCommInitRankConfig", "0xa", 0, 2, 0, 0x18000, 0x11, "Init COMPLETE")
START_B = init_228("ncclCommInitRankConfig", "0xb", 0, 2, 0, 0x18000, 0x22)
DONE_B = init_228("ncclCommInitRankConfig", "0xb", 0, 2, 0, 0x18000, 0x22, "Init COMPLETE")


def test_lines_between_start_and_complete_belong_to_that_comm_on_that_thread():
    a = run([(1, 1, START), (1, 9, START_B),  # two inits at once on two threads
             (1, 1, "Ring 00 : 1 -> 0 -> 1"), (1, 9, "Ring 00 : 1 -> 0 -> 1"),
             (1, 9, "Ring 01 : 1 -> 0 -> 1"), (1, 1, "4 coll channels, 4 p2p channels, 2 p2p channels per peer"),
             (1, 9, "8 coll channels, 8 p2p channels, 2 p2p channels per peer"),
             (1, 1, DONE), (1, 9, DONE_B)])
    va, vb = a.views
    assert (va.ptr, len(va.ring_neighbours), va.n_channels) == ("0xa", 1, 4)
    assert (vb.ptr, len(vb.ring_neighbours), vb.n_channels) == ("0xb", 2, 8)
    assert va.completed and vb.completed


def test_lazy_transports_follow_the_coll_line_of_the_same_thread():
    a = run([(1, 1, START), (1, 1, DONE), (1, 1, START_B), (1, 1, DONE_B),
             (1, 1, coll("AllReduce", 0, 8, 7, 0, 0, "0xb", 2)),
             (1, 1, "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
             (1, 1, coll("AllReduce", 0, 8, 7, 0, 0, "0xa", 2)),
             (1, 1, "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct")])
    va, vb = a.views
    assert [t.kind for t in va.transports] == ["SHM"]
    assert [t.kind for t in vb.transports] == ["P2P/CUMEM"]


def test_init_timings_go_to_the_comm_just_completed():
    a = run([(1, 1, START), (1, 1, DONE), (1, 1, timings("ncclCommInitRankConfig", 0, 2, 0.5)),
             (1, 1, START_B), (1, 1, DONE_B), (1, 1, timings("ncclCommInitRankConfig", 0, 2, 0.1))])
    assert [v.init_timings["total_s"] for v in a.views] == [0.5, 0.1]


def test_tuning_line_matched_by_op_and_size_within_a_group():
    # a coalesced group: two COLL lines, then the TUNING lines in another order (NCCL sorts tasks)
    a = run([(1, 1, START), (1, 1, DONE),
             (1, 1, coll("AllReduce", 0, 16, 7, 0, 0, "0xa", 2)),
             (1, 1, coll("AllReduce", 0, 1 << 20, 7, 0, 0, "0xa", 2)),
             (1, 1, algo_228("AllReduce", 4 << 20, "RING", "SIMPLE", 0, 3)),
             (1, 1, algo_228("AllReduce", 64, "TREE", "LL"))])
    small, big = a.views[0].calls
    assert (small.algorithm, small.protocol) == ("Tree", "LL")
    assert (big.algorithm, big.protocol, big.channels) == ("Ring", "Simple", [0, 3])


def test_pointer_reused_after_destroy_is_a_new_comm():
    destroy = "comm 0xa rank 0 nranks 2 cudaDev 0 busId 18000 commId 0x11 - Destroy COMPLETE"
    a = run([(1, 1, START), (1, 1, DONE), (1, 1, destroy),
             (1, 1, init_228("ncclCommInitRankConfig", "0xa", 0, 2, 0, 0x18000, 0x33)),
             (1, 1, coll("AllReduce", 0, 8, 7, 0, 0, "0xa", 2))])
    first, second = a.views
    assert first.destroyed and not first.calls
    assert (second.comm_id, len(second.calls)) == ("0x33", 1)


def test_split_fields_kept_and_coll_without_init_makes_an_unranked_view():
    a = run([(1, 1, START), (1, 1, DONE),
             (1, 1, split_228("0xc", 0, 2, 0, 0x18000, "0xa", 1, 5, 0)),
             (2, 2, coll("AllGather", 0, 8, 7, 0, 0, "0xf", 4))])
    split = a.views[1]
    assert (split.parent, split.split_count, split.color) == ("0xa", 1, 5)
    orphan = a.processes[("h", 2)].views[0]
    assert (orphan.rank, orphan.nranks, len(orphan.calls)) == (-1, 4, 1)


def test_warnings_env_network_versions_per_process():
    a = assemble([("t", 1, "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda12.9"),
                  ("t", 2, "h:2:2 [1] NCCL INFO NCCL version 2.27.3+cuda12.9"),
                  ("t", 3, "h:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1."),
                  ("t", 4, "h:1:1 [0] NCCL INFO Using network Socket"),
                  ("t", 5, "h:2:2 [1] misc/socket.cc:50 (ncclSocketConnect) NCCL WARN Net : Connect failed")])
    assert a.versions == {("h", 1): ("2.28.9", "12.9"), ("h", 2): ("2.27.3", "12.9")}
    assert a.env == {("h", 1): {"NCCL_P2P_DISABLE": "1"}}
    assert a.networks == {("h", 1): ["Socket"]}
    assert a.warnings[0]["msg"] == "Net : Connect failed" and a.warnings[0]["pid"] == 2
