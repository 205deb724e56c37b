"""dtlab check: its verdict rules held to recorded machines (a healthy 2x H200 pair, the same
pair with P2P off), the environment rules, known torch bugs told apart from a machine's faults,
and the whole quick level on this CPU machine (gloo; the GPU checks SKIP and say why)."""

import json

import pytest

from dtlab.check import FAIL, PASS, SKIP, WARN
from dtlab.check import checks as C
from dtlab.cli import main

NV18 = 18 * 25.0  # 2x H200 NV18: the links' ceiling per direction (GB/s)


@pytest.mark.parametrize("busbw, verdict", [
    (327.37, PASS),   # nccl-tests 1 GiB all_reduce, data/h200x2-nccl-tests/nt_all_reduce.txt
    (330.49, PASS),   # dtlab's, data/h200x2-dtlab-bench/bandwidth_gpu.csv
    (27.73, FAIL),    # NCCL_P2P_DISABLE=1: through host memory, data/h200x2-tuning/tuning.csv
    (200.0, WARN),    # in between: works, but not at the links' rate
])
def test_bandwidth_verdicts_against_recorded_machines(busbw, verdict):
    assert C.bandwidth_verdict(busbw, NV18) == verdict


def test_a_variable_that_slows_nccl_is_a_warning_and_multicast_is_reported_untouched():
    verdict, said, warns = C.env_rows({"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
                                       "NCCL_DEBUG": "INFO", "PATH": "/bin"})
    assert verdict == WARN and warns == [f"NCCL_P2P_DISABLE=1: {C.SLOWING['NCCL_P2P_DISABLE']}"]
    assert any(s.startswith("NCCL_NVLS_ENABLE=0") and "not changed" in s for s in said)
    assert C.env_rows({"PATH": "/bin"})[0] == PASS


def test_a_known_torch_bug_is_named_and_a_wrong_answer_of_the_machine_fails():
    known = [("broadcast", "float32", "non-contiguous", "rank 1, index 4: expected 144, got 154")]
    verdict, own, bugs = C.collectives_verdict(known, "gloo")
    assert verdict == PASS and own == [] and "pytorch/pytorch#192920" in bugs[0]
    # the same failure on NCCL is no known bug (NCCL refuses non-contiguous tensors): the machine
    assert C.collectives_verdict(known, "nccl")[0] == FAIL
    wrong = [("all_reduce", "float32", "sum", "rank 0, index 3: expected 6, got 5")]
    assert C.collectives_verdict(known + wrong, "gloo")[:2] == (FAIL, [
        "all_reduce float32 sum: rank 0, index 3: expected 6, got 5"])


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert main(["check", "--level", "fast"]) == 2
    assert main(["check", "--nprocs", "1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "choose quick, standard or full" in err[0] and "at least 2 ranks" in err[1]


def test_the_quick_level_on_this_machine(capsys, no_orphans):
    status = main(["check", "--json"])
    rep = json.loads(capsys.readouterr().out)
    rows = {r["check"]: r for r in rep["rows"]}
    assert list(rows) == ["software", "gpus", "collectives", "bandwidth", "failure"]
    assert rep["backend"] == "gloo" and rep["nprocs"] == 2
    assert rows["gpus"]["verdict"] == SKIP and rows["gpus"]["measured"]
    assert rows["bandwidth"]["verdict"] == SKIP and "no GPU links" in rows["bandwidth"]["measured"]
    assert rows["failure"]["verdict"] == PASS, rows["failure"]
    assert rows["collectives"]["verdict"] == PASS, rows["collectives"]
    assert status == (0 if rows["software"]["verdict"] == PASS else 1)


def test_a_check_that_cannot_run_is_a_failure_saying_why(monkeypatch):
    """A launch that fails (NCCL cannot initialise, a rank dies) is the machine's finding: a
    FAIL row with the error's first line, and the other checks still run."""
    def broken(nprocs, backend):
        raise RuntimeError("NCCL error: unhandled system error\nmore lines")

    for name in ("collectives", "failure_path"):
        monkeypatch.setattr(C, name, broken)
    rep = C.run("quick")
    rows = {r.check: r for r in rep.rows}
    assert rows["collectives"].verdict == FAIL and rows["failure"].verdict == FAIL
    assert rows["collectives"].measured == "could not run: RuntimeError: NCCL error: unhandled system error"
    assert rows["software"].verdict in (PASS, WARN) and rep.exit_status == 1


H200_P2P = [  # data/h200x2-bandwidth/p2p.csv: a healthy NV18 pair
    {"src": 0, "dst": 1, "peer_access": True, "uni_GBps": 386.81},
    {"src": 1, "dst": 0, "peer_access": True, "uni_GBps": 386.57},
]


def test_p2p_verdicts_name_the_pair_that_is_wrong():
    assert C.p2p_verdict(H200_P2P, NV18) == (PASS, "")
    four = [{"src": i, "dst": j, "peer_access": True, "uni_GBps": 380.0}
            for i in range(4) for j in range(4) if i != j]
    four[5]["uni_GBps"] = 60.0  # one link down to a fraction: the pair is named
    verdict, said = C.p2p_verdict(four, NV18)
    assert verdict == FAIL and f"{four[5]['src']}->{four[5]['dst']}" in said
    staged = [dict(r, peer_access=False) for r in H200_P2P]
    assert C.p2p_verdict(staged, NV18)[0] == FAIL
    # every pair alike and slow (the whole machine's links at a fraction): held to the ceiling
    assert C.p2p_verdict([dict(r, uni_GBps=100.0) for r in H200_P2P], NV18)[0] == FAIL
    assert C.p2p_verdict([dict(r, uni_GBps=200.0) for r in H200_P2P], NV18)[0] == WARN
    assert C.p2p_verdict([dict(r, uni_GBps=200.0) for r in H200_P2P], None)[0] == PASS


def test_latency_is_held_to_the_recorded_floor_on_nvlink_only():
    assert C.latency_verdict(5.0, nvlink=True) == PASS     # data/h200x2-check-standard
    assert C.latency_verdict(6.1, nvlink=True) == PASS     # the slowest size, data/h200x2-graph-replays
    assert C.latency_verdict(31.5, nvlink=True) == WARN    # sockets only, data/h200x2-check-standard
    assert C.latency_verdict(40.0, nvlink=True) == WARN
    assert C.latency_verdict(40.0, nvlink=False) == SKIP   # PCIe: no floor recorded to hold it to


def test_the_standard_level_on_this_machine(capsys, no_orphans):
    status = main(["check", "--level", "standard", "--json"])
    rep = json.loads(capsys.readouterr().out)
    rows = {r["check"]: r for r in rep["rows"]}
    assert list(rows)[5:] == ["p2p", "latency", "parity"]
    assert rows["p2p"]["verdict"] == SKIP and rows["latency"]["verdict"] == SKIP
    assert rows["parity"]["verdict"] == PASS and "max |diff|" in rows["parity"]["measured"]
    assert status in (0, 1)


def test_the_html_report_is_one_page_with_the_pictures(tmp_path, capsys):
    """--html: the table as one page; the pictures made from recorded measurements (the P2P
    matrix of a healthy 2x H200, data/h200x2-bandwidth/p2p.csv) are inside it, not beside it."""
    import base64

    from dtlab.check import Report, Row
    from dtlab.check.figures import bandwidth_png, p2p_png

    rows = [dict(r, bi_GBps=0.0, latency_us=0.0, size=1 << 28) for r in H200_P2P]
    figs = {"p2p": p2p_png(rows),
            "bandwidth": bandwidth_png([1 << 20, 1 << 30], [49.7, 327.4], NV18, 0.60, 0.73)}
    for png in figs.values():
        assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    rep = Report([Row("p2p", PASS, "2 ordered pairs <ok>", "", "", ""),
                  Row("latency", WARN, "31.5 us", "<= 16 us", "data/x", "look")],
                 level="standard", backend="nccl", nprocs=2, figures=figs)
    page = rep.to_html()
    assert page.count("<img") == 2 and "&lt;ok&gt;" in page and "look at: latency" in page
    assert "src='http" not in page and "<script" not in page  # nothing to fetch
    out = tmp_path / "check.html"
    assert main(["check", "--html", str(out)]) in (0, 1)
    assert "<table>" in out.read_text() and f"wrote {out}" in capsys.readouterr().err
    assert main(["check", "--html", str(tmp_path / "no" / "x.html")]) == 2  # refused first
