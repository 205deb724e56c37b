"""The relay (dtlab.runtime.relay, relaypg, observed): ranks whose every message passes through
the launching process, which serves torch.distributed's calls and records them."""

import pytest
import torch
import torch.distributed as dist

from dtlab.runtime import observed


def everything(x):
    """Rank side: each served op once, with a mark and a fetch; what came back."""
    r, n = dist.get_rank(), dist.get_world_size()
    observed.mark({"case": 0})
    t = torch.tensor(x, dtype=torch.float32)
    got = torch.empty_like(t)
    ops = [dist.P2POp(dist.isend, t, (r + 1) % n), dist.P2POp(dist.irecv, got, (r - 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    s = t.clone()
    dist.all_reduce(s)
    m = t.clone()
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    parts = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(parts, t)
    flat = torch.empty(n * t.numel())
    dist.all_gather_into_tensor(flat, t)
    mine = torch.empty(2)
    dist.reduce_scatter_tensor(mine, torch.arange(2.0 * n) + 10 * r)
    b = t.clone()
    dist.broadcast(b, src=1)
    dist.barrier()
    own = torch.ones(1)  # a rank that files its own message under a case of its choosing
    dist.group.WORLD._op("all_reduce", [own], [own], reduce="sum", info={"mark": {"case": 99}}).wait()
    header, _ = observed.fetch({"sample": r})
    return {"got": got.tolist(), "sum": s.tolist(), "max": m.tolist(),
            "gathered": [p.tolist() for p in parts], "flat": flat.tolist(), "mine": mine.tolist(),
            "bcast": b.tolist(), "fetched": header["value"]}


def refusals():
    """Rank side: what the relay refuses, caught."""
    said = {}
    for name, call in (("not offered", lambda: dist.all_gather([torch.zeros(1)] * 2, torch.zeros(1))),
                       ("too big", lambda: dist.all_reduce(torch.zeros(8))),
                       ("disagree", lambda: dist.all_reduce(torch.zeros(1 + dist.get_rank())))):
        try:
            call()
            said[name] = "ran"
        except RuntimeError as e:
            said[name] = str(e)
    return said


def ddp(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2).double()
    wrapped = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        x = torch.randn(4, 3, dtype=torch.float64) * (dist.get_rank() + 1)
        wrapped(x).sum().backward()
        opt.step()
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]


def deadlock():
    t = torch.zeros(1)
    if dist.get_rank() == 0:
        dist.recv(t, 1)       # rank 1 never sends
    else:
        dist.all_reduce(t)    # rank 0 never joins


def spin():
    while True:
        pass


@pytest.mark.slow
def test_every_op_is_served_and_recorded(no_orphans):
    out = observed.run(everything, [([1.0, 2.0],), ([3.0, 4.0],), ([5.0, 6.0],)],
                       serve=lambda m: ({"value": 100 + m.info["sample"]}, b""))
    assert out.ok, (out.stopped, out.errors)
    v = out.values
    assert [v[r]["got"] for r in range(3)] == [[5.0, 6.0], [1.0, 2.0], [3.0, 4.0]]  # from the left
    assert all(v[r]["sum"] == [9.0, 12.0] and v[r]["max"] == [5.0, 6.0] for r in range(3))
    assert all(v[r]["gathered"] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]] for r in range(3))
    assert all(v[r]["flat"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] for r in range(3))
    assert [v[r]["mine"] for r in range(3)] == [[30.0, 33.0], [36.0, 39.0], [42.0, 45.0]]
    assert all(v[r]["bcast"] == [3.0, 4.0] and v[r]["fetched"] == 100 + r for r in range(3))
    mine = [m for m in out.traffic if m.rank == 0]
    assert [m.op for m in mine] == ["mark", "send", "recv", "all_reduce", "all_reduce", "all_gather",
                                    "all_gather", "reduce_scatter", "broadcast", "barrier",
                                    "all_reduce", "fetch"]
    send = mine[1]
    assert (send.peer, send.dtype, send.shapes, send.info["mark"]) == (1, "float32", [[2]], {"case": 0})
    assert mine[10].info["mark"] == {"case": 0}  # the relay's mark, not the one the rank wrote
    assert mine[4].reduce == "max" and mine[2].got == mine[2].got and mine[2].peer == 2


@pytest.mark.slow
def test_refusals_name_the_reason(no_orphans):
    out = observed.run(refusals, [(), ()], offer={"all_reduce"}, max_numel={"all_reduce": 4})
    said = out.values[0]
    assert "dist.all_gather is not available in this exercise's process group (it offers: " \
           "all_reduce)" in said["not offered"]
    assert "dist.all_reduce of 8 elements" in said["too big"] and "at most 4" in said["too big"]
    assert "the ranks called different collectives at #1" in said["disagree"]
    assert "rank 0: all_reduce(float32, shapes [[1]]" in said["disagree"]


@pytest.mark.slow
def test_ddp_over_the_relay_keeps_ranks_in_step(no_orphans):
    out = observed.run(ddp, [(0,), (0,)])
    assert out.ok and out.values[0] == out.values[1], (out.errors, out.stopped)
    ops = [m.op for m in out.traffic if m.rank == 0]
    assert ops.count("all_reduce") >= 2 and "broadcast" in ops  # gradients; the start's sync


@pytest.mark.slow
def test_a_deadlock_is_named_not_waited_out(no_orphans):
    out = observed.run(deadlock, [(), ()], idle_s=120)
    assert out.stopped.startswith("deadlock"), out.stopped
    assert "rank 0 waits in recv from rank 1" in out.stopped
    assert "rank 1 waits in all_reduce (collective #1)" in out.stopped


@pytest.mark.slow
def test_cpu_time_bounds_a_busy_rank(no_orphans):
    out = observed.run(spin, [(), ()], cpu_s=4)
    assert "more than 4 s of CPU time" in out.stopped


def test_marks_of_the_ranks_own_are_named_not_trusted():
    """Rank code can send marks as the harness does: traffic filed under a call the harness never
    made must not slip past the per-call checks (dtlab.course.traffic.forged)."""
    import pytest

    from dtlab.course import traffic
    from dtlab.runtime.relay import Message

    def job(*marks_per_rank):
        out, seq = [], 0
        for r, marks in enumerate(marks_per_rank):
            for i, k in enumerate(marks):  # stamped with the mark before, as the relay does
                out.append(Message(seq, r, "mark", info={"call": k, **({"mark": {"call": marks[i - 1]}} if i else {})}))
                out.append(Message(seq + 1, r, "send", peer=1 - r, info={"mark": {"call": k}}))
                seq += 2
        return out

    honest = job([0, 1, 2], [0, 1, 2])
    assert traffic.forged(honest) == "" and len(traffic.by_call(honest)) == 6
    for forged in (job([0, 99, 0, 1, 2], [0, 1, 2]),   # a hidden call, then back
                   job([0, 1, 2], [0, 2]),             # a call skipped
                   job([1, 0, 2], [0, 1, 2])):         # out of order
        assert "not the harness's calls" in traffic.forged(forged)
        with pytest.raises(AssertionError, match="hides traffic"):
            traffic.by_call(forged)
    extra = job([0, 1], [0, 1])
    extra.append(Message(99, 0, "mark", info={"call": 2, "mine": True}))
    assert traffic.forged(extra)


def lying_header():
    """Rank side: an all_reduce whose header claims 1000 floats and carries one."""
    pg = dist.group.WORLD
    pg = pg if hasattr(pg, "conn") else pg._get_backend(torch.device("cpu"))
    pg.conn.ask({"t": "op", "op": "all_reduce", "dtype": "float32", "shapes": [[1000]],
                 "reduce": "sum"}, b"\0\0\x80?", lambda h, p: None).wait()


@pytest.mark.slow
def test_a_payload_that_does_not_fit_its_shapes_is_the_rank_s_error(no_orphans):
    out = observed.run(lying_header, [(), ()])
    assert "sent the relay a malformed request (RuntimeError" in " ".join(out.errors.values()), \
        out.errors
