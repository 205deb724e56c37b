"""dtlab.collectives without ranks: the schedules and their counts against the closed forms,
the alpha-beta costs, the drawings, the numerics helper, the report, and every docstring."""

import doctest
import importlib
import json
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from dtlab import collectives  # noqa: E402
from dtlab.collectives import algorithms as alg  # noqa: E402
from dtlab.collectives.drawing import movement  # noqa: E402
from dtlab.collectives.report import Report, merge  # noqa: E402

MODULES = ["", ".algorithms", ".numerics", ".values", ".report", ".drawing", ".validation",
           ".p2p_checks", ".checks"]


@pytest.mark.parametrize("mod", MODULES)
def test_docstrings_run(mod):
    m = importlib.import_module("dtlab.collectives" + mod)
    assert doctest.testmod(m, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_traffic_is_the_closed_form(n):
    nbytes = 840 * n  # divisible by n: the closed forms are exact
    ring = collectives.traffic("ring_all_reduce", n, nbytes)
    assert ring == {"bytes_sent_per_rank": 2 * (n - 1) * nbytes // n,
                    "bytes_sent_total": 2 * (n - 1) * nbytes, "steps": 2 * (n - 1)}
    log2 = math.ceil(math.log2(n))
    assert collectives.traffic("tree_broadcast", n, nbytes) == {
        "bytes_sent_per_rank": log2 * nbytes, "bytes_sent_total": (n - 1) * nbytes,
        "steps": log2}
    rd = collectives.traffic("recursive_doubling_all_reduce", n, nbytes)
    p = 1 << (n.bit_length() - 1)
    if p == n:
        assert rd == {"bytes_sent_per_rank": int(math.log2(n)) * nbytes,
                      "bytes_sent_total": n * int(math.log2(n)) * nbytes,
                      "steps": int(math.log2(n))}
    else:  # extra ranks fold in and get the answer back: two more steps, one more message
        assert rd["steps"] == int(math.log2(p)) + 2
        assert rd["bytes_sent_per_rank"] == (int(math.log2(p)) + 1) * nbytes


def test_ring_traffic_for_sizes_not_divisible_by_n():
    t = collectives.traffic("ring_all_reduce", 4, 10)  # chunks of 3, 3, 2, 2 bytes
    assert t["bytes_sent_total"] == 2 * 3 * 10 and t["bytes_sent_per_rank"] == 16
    assert collectives.traffic("ring_all_reduce", 4, 1)["bytes_sent_per_rank"] == 2


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_ring_schedule_hands_each_rank_its_chunk(n):
    for r in range(n):
        steps = alg.ring_schedule(n, r)
        rs = [s for s in steps if s["phase"] == "reduce-scatter"]
        assert rs[-1]["recv"] == (r + 1) % n  # owns the finished chunk r+1 after n-1 steps
        ag = [s for s in steps if s["phase"] == "all-gather"]
        assert {s["recv"] for s in ag} | {(r + 1) % n} == set(range(n))
    for s in range(2 * (n - 1)):  # what r sends at step s is what r+1 receives
        for r in range(n):
            right = alg.ring_schedule(n, (r + 1) % n)
            assert alg.ring_schedule(n, r)[s]["send"] == right[s]["recv"]


@pytest.mark.parametrize("n,src", [(2, 0), (5, 2), (8, 7)])
def test_tree_reaches_every_rank_once(n, src):
    have = {src}
    for k in range((n - 1).bit_length()):
        sends = [(r, s["peer"]) for r in range(n) for s in alg.binomial_tree_schedule(n, r, src)
                 if s["round"] == k and s["kind"] == "send"]
        assert all(a in have and b not in have for a, b in sends)
        have |= {b for _, b in sends}
    assert have == set(range(n))


def test_cost_is_alpha_beta():
    a, b = 1e-5, 1e-9
    for name in collectives.ALGORITHMS:
        t = collectives.traffic(name, 8, 1 << 20)
        assert collectives.cost(name, 8, 1 << 20, a, b) == pytest.approx(
            t["steps"] * a + t["bytes_sent_per_rank"] * b)
    # small messages: few steps win; large ones: the ring's 2(n-1)/n wins
    assert collectives.cost("recursive_doubling_all_reduce", 8, 8, a, b) < \
        collectives.cost("ring_all_reduce", 8, 8, a, b)
    assert collectives.cost("ring_all_reduce", 8, 1 << 30, a, b) < \
        collectives.cost("recursive_doubling_all_reduce", 8, 1 << 30, a, b)
    with pytest.raises(ValueError, match="not one of"):
        collectives.traffic("butterfly", 4, 8)


@pytest.mark.parametrize("op", collectives.OPS)
def test_draw_returns_a_figure_for_every_op(op):
    from matplotlib.figure import Figure

    for n in (2, 3, 4):
        fig = collectives.draw(op, n)
        assert isinstance(fig, Figure) and len(fig.axes) == 2
    before, after = movement(op, 4)
    assert len(before) == len(after) == 4


def test_reduction_error_within_bound_and_order_matters():
    for dtype in ("float16", "bfloat16", "float32"):
        r = collectives.reduction_error(dtype, 8, size=2048)
        assert r["within_bound"] and 0 < r["max_error"] <= r["bound"]
    assert collectives.reduction_error("bfloat16", 8)["orders_differ"]
    assert collectives.sum_error_bound("int64", 8, 100.0) == 0
    with pytest.raises(ValueError):
        collectives.reduction_error("int8", 2)


def test_report_merges_ranks_and_serialises():
    row = {"op": "all_reduce", "dtype": "float32", "size": 7, "check": "sum"}
    rows = merge([[{**row, "status": "pass", "detail": "", "rank": 0},
                   {**row, "check": "avg", "status": "unsupported", "detail": "no AVG",
                    "rank": 0}],
                  [{**row, "status": "fail", "detail": "rank 1, index 2: expected 3, got 4",
                    "rank": 1},
                   {**row, "check": "avg", "status": "pass", "detail": "", "rank": 1}]])
    rep = Report(rows, nprocs=2, backend="gloo")
    assert not rep.ok and [r.check for r in rep.failures] == ["sum"]
    assert [r.ok for r in rep.rows] == [False, None]
    d = json.loads(json.dumps(rep.to_dict()))
    assert set(d) == {"ok", "nprocs", "backend", "results"}
    assert "FAIL" in rep.table() and "<table>" in rep._repr_html_()


def test_bad_arguments_refused_before_launch():
    with pytest.raises(ValueError, match="not one of"):
        collectives.validate("all_reduction")
    with pytest.raises(ValueError, match="sizes"):
        collectives.validate("all_reduce", sizes=[0])
    with pytest.raises(ValueError, match="send"):
        collectives.validate("sendrecv", impl=lambda *a: None)
    with pytest.raises(ValueError, match="dtypes"):
        collectives.validate("all_reduce", dtypes=["complex64"])


@pytest.mark.parametrize("text, unsupported", [
    # NCCL's refusal of a non-contiguous tensor, as torch 2.11 raised it on 2x H200
    ("ValueError: Tensors must be contiguous", True),
    ("RuntimeError: ProcessGroupGloo does not support reduce_scatter", True),
    ("AssertionError: rank 1 holds 3 where 5 was expected", False),  # a wrong answer fails
    ("RuntimeError: Connection closed by peer", False),
])
def test_a_backend_refusal_is_unsupported_not_a_failure(text, unsupported):
    from dtlab.collectives.values import UNSUPPORTED

    assert bool(UNSUPPORTED.search(text)) is unsupported
