"""dtlab.collectives on live gloo ranks: torch's collectives and the hand-written algorithms on
2, 3 and 4 ranks (one launch per world size), the broken implementations caught (one launch),
and ``dtlab validate --json``."""

import json
import re

import pytest

from broken_collectives import BROKEN
from dtlab import cli, collectives
from dtlab.collectives import (OPS, recursive_doubling_all_reduce, ring_all_reduce,
                               tree_broadcast)

# torch 2.13's gloo all_reduce and broadcast on a non-contiguous view work on the first numel
# elements of the *storage* (gaps included) and leave the rest of the view alone -- silently
# wrong, no error. The validator fails them; so does every size above 1. Found by this check.
GLOO_NONCONTIG = {("all_reduce", "sum non-contiguous"), ("broadcast", "non-contiguous")}
DETAIL = re.compile(r"rank \d+.*, index \S+: expected \S+, got \S+")

ALGORITHMS = [("all_reduce", ring_all_reduce), ("all_reduce", recursive_doubling_all_reduce),
              ("broadcast", tree_broadcast)]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("nprocs", [2, pytest.param(3, marks=pytest.mark.slow),
                                    pytest.param(4, marks=pytest.mark.slow)])
def test_every_collective_and_algorithm_on_gloo(nprocs, no_orphans):
    reps = collectives.validate_each([(op, None) for op in OPS] + ALGORITHMS, nprocs=nprocs,
                                     backend="gloo")
    torch_rows = [row for rep in reps[:len(OPS)] for row in rep.rows]
    assert {row.op for row in torch_rows} == set(OPS)
    assert {row.dtype for row in torch_rows} == {"float32", "float16", "bfloat16", "int64"}
    assert {1, 7, 67} == {row.size for row in torch_rows}
    failed = {(r.op, r.check) for r in torch_rows if r.status == "fail"}
    assert failed <= GLOO_NONCONTIG, [r for r in torch_rows if r.status == "fail"]
    for row in torch_rows:
        if row.status == "fail":
            assert row.size > 1 and DETAIL.search(row.detail), row
        if row.status == "unsupported":  # gloo's alltoall (list) refuses uneven splits
            assert (row.op, row.check) == ("all_to_all", "list uneven"), row
            assert row.ok is None and "gloo" in row.detail.lower()
    assert sum(r.status == "pass" for r in torch_rows) > 250

    for (op, fn), rep in zip(ALGORITHMS, reps[len(OPS):]):
        assert rep.ok, f"{fn.__name__} on {nprocs} ranks:\n{rep.table()}"
        checks = {r.check for r in rep.rows}
        assert checks >= ({"sum", "avg", "max", "min", "product", "sum non-contiguous",
                           "sum random"} if op == "all_reduce" else {"src 0", "src last"})
        assert {r.op for r in rep.rows} == {op}


@pytest.mark.timeout(60)
def test_each_broken_implementation_fails_with_rank_index_expected_got(no_orphans):
    names = list(BROKEN)
    reps = collectives.validate_each([BROKEN[n] for n in names], nprocs=3, backend="gloo",
                                     dtypes=["float32", "int64", "bfloat16"], sizes=[1, 7])
    for name, rep in zip(names, reps):
        # gloo's own non-contiguous all_reduce is wrong (above): count only the other checks
        caught = [r for r in rep.failures if "non-contiguous" not in r.check]
        assert not rep.ok and caught, f"{name} passed:\n{rep.table()}"
        assert all(DETAIL.search(r.detail) for r in caught), (name, caught[0].detail)
    caught = {name: [r for r in rep.failures if "non-contiguous" not in r.check]
              for name, rep in zip(names, reps)}
    permuted = caught["chunks permuted"][0].detail
    assert "rank 0" in permuted and "[0][0]" in permuted and "= rank 1's element 0" in permuted
    stale = caught["stale data from the previous call"]
    assert {r.check for r in stale} >= {"avg"}  # sum then avg: same shape, different answer
    assert all(r.detail.startswith("rank 1,") for r in stale)
    assert all(r.detail.startswith("rank 2,") and "also wrong" not in r.detail
               for r in caught["right on every rank but one"])
    dropped = caught["one rank's contribution dropped"]
    assert any("also wrong on ranks 1, 2" in r.detail for r in dropped)


@pytest.mark.timeout(60)
def test_cli_validate_json(capsys, no_orphans):
    rc = cli.main(["validate", "--op", "gather,scatter,alltoall", "--nprocs", "2",
                   "--backend", "gloo", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"] is True
    assert (out["nprocs"], out["backend"]) == (2, "gloo")
    assert {r["op"] for r in out["results"]} == {"gather", "scatter", "all_to_all"}
    row = out["results"][0]
    assert set(row) == {"op", "dtype", "size", "check", "status", "ok", "detail"}
    unsupported = [r for r in out["results"] if r["status"] == "unsupported"]
    assert unsupported and all(r["ok"] is None for r in unsupported)


@pytest.mark.parametrize("argv", [["--op", "all_reduce,nope"], ["--nprocs", "1"],
                                  ["--backend", "mpi?"], ["--timeout", "-1"],
                                  ["--op", ""], ["--op", "all_reduce,,gather"]])  # '' ran all
def test_cli_validate_bad_input_is_one_line_and_status_2(argv, capsys, no_orphans):
    assert cli.main(["validate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dtlab validate: ") and "\n" not in err and "Traceback" not in err
