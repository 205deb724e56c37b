"""Pass 4: the first collective where ranks disagree, or where a rank has fewer calls."""

import pytest
from nccl_synth import coll, info, init_228, world_log

import dtlab.nccl_log as nl
from dtlab.nccl_log.divergence import divergence, opcount_check
from dtlab.nccl_log.model import Call

AR = ("AllReduce", 1024, 7, 0, 0)  # op, count, datatype (ncclFloat32), redop (ncclSum), root


def call(op="AllReduce", count=1024, dtype=7, redop=0, root=0, opcount=0):
    return Call(op, opcount, count, dtype, redop, root, "0x1", 2)


def test_none_when_all_agree():
    assert divergence({0: [call(), call()], 1: [call(), call()]}) is None
    assert nl.parse(world_log({0: [AR, AR], 1: [AR, AR]})).divergence is None


@pytest.mark.parametrize("odd,reason", [
    (("AllReduce", 512, 7, 0, 0), "count"),
    (("AllReduce", 1024, 9, 0, 0), "datatype"),   # ncclBfloat16 vs ncclFloat32
    (("AllGather", 1024, 7, 0, 0), "op"),
    (("AllReduce", 1024, 7, 2, 0), "redop"),      # ncclMax vs ncclSum
    (("Broadcast", 1024, 7, 0, 1), "op"),
])
def test_two_ranks_name_both_unsure(odd, reason):
    log = nl.parse(world_log({0: [AR, AR, AR], 1: [AR, odd, AR]}))
    d = log.divergence
    assert (d["position"], d["ranks"], d["reason"], d["confident"]) == (2, [0, 1], reason, False)
    assert d["calls"][0]["datatype_name"] == "ncclFloat32"


def test_root_mismatch():
    bc = ("Broadcast", 64, 7, 0, 0)
    d = nl.parse(world_log({0: [bc], 1: [("Broadcast", 64, 7, 0, 1)]})).divergence
    assert (d["position"], d["reason"]) == (1, "root")


def test_three_ranks_name_the_odd_one_out():
    d = nl.parse(world_log({0: [AR, AR], 1: [AR, ("AllReduce", 1024, 6, 0, 0)], 2: [AR, AR]})).divergence
    assert (d["position"], d["ranks"], d["reason"], d["confident"]) == (2, [1], "datatype", True)
    assert d["calls"][1]["datatype_name"] == "ncclFloat16"


def test_a_rank_with_fewer_calls():
    log = nl.parse(world_log({0: [AR, AR, AR], 1: [AR, AR, AR], 2: [AR, AR]}))
    d = log.divergence
    assert (d["position"], d["ranks"], d["reason"]) == (3, [2], "fewer_calls")
    assert d["n_calls"] == {0: 3, 1: 3, 2: 2} and d["calls"][2] is None


def test_first_difference_wins_over_later_shortfall():
    d = divergence({0: [call(), call(), call()], 1: [call(), call(count=8)]})
    assert (d["position"], d["reason"]) == (2, "count")


def test_no_majority_names_every_candidate_unsure():
    b, c = call(count=8), call(count=4)
    for calls in ({0: [call()], 1: [b], 2: [c]}, {0: [call()], 1: [call()], 2: [b], 3: [b]},
                  {0: [call()], 1: [call()], 2: [b], 3: [c]}):  # a plurality is not a majority
        d = divergence(calls)
        assert (d["ranks"], d["confident"]) == (sorted(calls), False)


def test_two_ranks_one_short_is_a_tie():
    d = divergence({0: [call(), call()], 1: [call()]})
    assert (d["position"], d["reason"], d["ranks"], d["confident"], d["fewer"]) == \
        (2, "fewer_calls", [0, 1], False, [1])


def test_send_recv_are_not_compared():
    text = world_log({0: [AR, ("Send", 8, 7, 0, 1), AR], 1: [AR, ("Recv", 8, 7, 0, 0), AR]})
    log = nl.parse(text)
    assert log.divergence is None
    assert log.to_dict()["n_collectives"] == {0: 3, 1: 3}


def test_opcount_cross_check():
    agree = {0: [call(opcount=0), call(opcount=1)], 1: [call(opcount=0), call(opcount=1)]}
    assert opcount_check(agree) == {"used": True, "agrees": True}
    skew = {0: [call(opcount=4), call(opcount=5)], 1: [call(opcount=4), call(opcount=6)]}
    assert opcount_check(skew)["first_mismatch"] == 2
    assert opcount_check({0: [call()], 1: [call()]})["used"] is False
    log = nl.parse(world_log({0: [AR, AR], 1: [AR, AR]}, opcount_step=1))
    assert log.alignment["opcount"] == {"used": True, "agrees": True}


def test_only_within_the_chosen_communicator():
    # the world comm agrees; a second comm (commId 0x99) diverges
    lines = [world_log({0: [AR], 1: [AR]})]
    for r in (0, 1):
        lines.append(info("node", 100 + r, 100 + r, r, init_228(
            "ncclCommInitRankConfig", "0x%x" % (0xB000 + r), r, 2, r, 0x1000, 0x99)))
        lines.append(info("node", 100 + r, 100 + r, r, coll(
            "AllReduce", 0, 8 * (r + 1), 7, 0, 0, "0x%x" % (0xB000 + r), 2)))
    text = "".join(lines[:1]) + "\n".join(lines[1:]) + "\n"
    assert nl.parse(text).divergence is None
    d = nl.parse(text, comm="0x99").divergence
    assert (d["position"], d["reason"]) == (1, "count")
