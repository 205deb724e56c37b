"""check_world on hand-made rank tables (synthetic), and the pairs every rank times."""

from dtlab.multinode.world import check_world, nodes, pairs


def row(rank, node, local, ws=4, lws=2, host=None, uuid=None):
    gpu = {"name": "H100", "uuid": uuid, "bus_id": None} if uuid else None
    return {"rank": rank, "world_size": ws, "node": node, "local_rank": local,
            "local_world_size": lws, "host": host or f"h{node}", "gpu": gpu}


def whole():
    return [row(r, r // 2, r % 2, uuid=f"GPU-{r}") for r in range(4)]


def test_a_whole_world_is_ok():
    r = check_world(whole())
    assert r["ok"] and r["ranks_present"] == 4 and r["missing"] == []


def test_missing_duplicate_and_out_of_range_ranks():
    t = whole()[:3] + [row(1, 0, 1, uuid="GPU-9"), row(7, 1, 1, uuid="GPU-7")]
    r = check_world(t)
    assert r["missing"] == [3] and r["duplicate_ranks"] == [1] and r["out_of_range"] == [7]
    assert not r["ok"]


def test_two_ranks_on_one_gpu_and_a_wrong_local_rank():
    t = whole()
    t[3] = row(3, 1, 0, uuid="GPU-2")  # LOCAL_RANK 0 twice on node 1, so the same GPU twice
    r = check_world(t)
    assert r["duplicate_gpus"] == [[2, 3]] and r["bad_local_ranks"] == [3]


def test_local_rank_beyond_the_node_and_bus_id_without_uuid():
    t = [row(0, 0, 0, ws=2, lws=1), row(1, 0, 5, ws=2, lws=1)]
    for r in t:
        r["gpu"] = {"name": "A100", "uuid": "", "bus_id": "0000:07:00.0"}
    r = check_world(t)
    assert r["bad_local_ranks"] == [1] and r["duplicate_gpus"] == [[0, 1]]


def test_pairs_and_nodes():
    t = whole()
    assert [n["ranks"] for n in nodes(t)] == [[0, 1], [2, 3]]
    assert [(p["kind"], p["ranks"]) for p in pairs(t)] == [
        ("within", [0, 1]), ("within", [2, 3]), ("across", [0, 2])]
