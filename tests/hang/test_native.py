"""Below Python (dtlab.hang.native): the readers on the real recording from 2x H100
(data/h100x2-native, see its README for what each file is), strict about lines they do not
understand; and a live ``py-spy dump --native`` of a gloo rank stuck in a collective."""

import csv
import os

import pytest

import dtlab
from dtlab.hang.native import cuda_gdb, pyspy, ras

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "h100x2-native")


def recorded(name: str) -> str:
    with open(os.path.join(DATA, name)) as f:
        return f.read()


def layers(thread: dict) -> list[tuple[str, str | None, list[str]]]:
    return [(r["group"], r["library"], [f["func"] for f in r["frames"]]) for r in thread["runs"]]


# -- py-spy --------------------------------------------------------------------------------------

def test_pyspy_native_rank0_waits_in_the_cuda_driver_under_synchronize():
    dump = pyspy.read(recorded("pyspy-native-rank0.txt"))
    assert (dump["pid"], dump["python"], dump["unparsed"]) == (753, "3.12.3", [])
    [main] = dump["threads"]  # py-spy shows only threads that run Python
    assert (main["tid"], main["state"], main["name"]) == (753, "active", "MainThread")
    got = layers(main)
    assert [g for g, _, _ in got] == ["CUDA driver", "CUDA runtime", "torch", "torch", "Python",
                                      "C/C++ runtime"]
    driver, runtime, c10, binding, python, _ = got
    assert driver[1] == "libcuda" and driver[2][-1] == "cuCtxSynchronize_v2" and len(driver[2]) == 10
    assert runtime[1:] == ("libcudart", ["0x7ff6c4e0f57b", "cudaDeviceSynchronize"])
    assert c10[1:] == ("libc10_cuda", ["c10::cuda::device_synchronize"])
    assert binding[1:] == ("libtorch_python", ["THCPModule_cudaSynchronize"])
    assert [(f["func"], f["file"], f["line"]) for f in main["runs"][4]["frames"]] == [
        ("synchronize", "torch/cuda/__init__.py", 1162), ("<module>", "gpu_stuck_rank.py", 30)]
    assert "cudaDeviceSynchronize" in pyspy.render(dump)


def test_pyspy_rank1_sleeps_in_python_and_plain_dumps_have_no_native_frames():
    [main] = pyspy.read(recorded("pyspy-native-rank1.txt"))["threads"]
    assert main["state"] == "idle"
    assert layers(main)[:2] == [("C/C++ runtime", "libc", ["clock_nanosleep"]),
                                ("Python", None, ["<module>"])]
    [plain] = pyspy.read(recorded("pyspy-rank0.txt"))["threads"]
    assert {f["kind"] for f in plain["frames"]} == {"python"}


def test_pyspy_reader_keeps_what_it_does_not_understand():
    text = recorded("pyspy-native-rank1.txt") + "    a frame without its place\n"
    dump = pyspy.read(text)
    assert dump["unparsed"] == ["    a frame without its place"]
    assert len(dump["threads"][0]["frames"]) == 3  # not made into a fourth
    refused = pyspy.read("Permission Denied: Try running again with elevated permissions")
    assert refused["threads"] == [] and "Permission Denied" in pyspy.render(refused)


# -- cuda-gdb ------------------------------------------------------------------------------------

def test_cuda_gdb_threads_and_the_nccl_kernel():
    gdb = cuda_gdb.read(recorded("cuda-gdb-rank0.txt"))
    names = {t["lwp"]: t["name"] for t in gdb["threads"]}
    assert len(names) == 9 and names[753] == "python3"
    assert {"pt_nccl_watchdg", "pt_nccl_heartbt", "cuda-EvtHandlr"} <= set(names.values())
    runs = {t["runs"] for t in gdb["threads"]}
    assert {"ncclProxyService", "ncclProxyServiceUDS", "rasThreadMain",
            "c10d::ProcessGroupNCCL::Watchdog::runLoop()"} <= runs
    main = next(t for t in gdb["threads"] if t["lwp"] == 753)
    assert [f["func"] for f in main["backtrace"] if f["func"]][:3] == [
        "cuCtxSynchronize_v2", "cudaDeviceSynchronize", "c10::cuda::device_synchronize()"]
    [kernel] = gdb["kernels"]
    assert kernel == {"kernel": 0, "parent": None, "device": 0, "grid": 4, "status": "Active",
                      "sms_mask": "0x000000000000000000000000000fff0fff", "sms": 24,
                      "grid_dim": (24, 1, 1), "block_dim": (544, 1, 1),
                      "invocation": "ncclDevKernel_AllReduce_Sum_f32_RING_LL()", "current": True}
    assert [(d["device"], d["name"], d["sms"], d["active_sms"]) for d in gdb["devices"]] == [
        (0, "NVIDIA H100 80GB HBM3", 132, 24), (1, "NVIDIA H100 80GB HBM3", 132, 0)]
    assert gdb["focus_function"] == "ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE"
    # what is left is gdb's own chatter, no table row
    assert all(ln.startswith(("[", "Using host libthread_db", 'Thread 1 "python3" stopped',
                              "  Id   Target Id")) for ln in gdb["unparsed"]), gdb["unparsed"]


def test_cuda_gdb_a_row_it_cannot_read_is_no_kernel():
    text = recorded("cuda-gdb-rank0.txt").replace("(24,1,1) (544,1,1)", "(24,1,1) ?")
    gdb = cuda_gdb.read(text)
    assert gdb["kernels"] == []
    assert any("ncclDevKernel_AllReduce" in ln for ln in gdb["unparsed"])


# -- NCCL RAS, nvidia-smi ------------------------------------------------------------------------

def test_ncclras_names_the_mismatch_in_text_and_json():
    text = ras.read_text(recorded("ncclras.txt"))
    assert (text["nccl"], text["cuda"], text["unparsed"], text["errors"]) == ("2.28.9", "13.0", [], [])
    assert text["summary"] == {"nodes": 1, "processes_per_node": 2, "gpus_per_process": 1,
                               "processes": 2, "gpus": 2}
    [group] = text["groups"]
    assert (group["ranks_per_comm"], group["status"], group["errors"]) == (2, "RUNNING", "MISMATCH")
    [warning] = text["warnings"]
    assert (warning["kind"], warning["collective"], warning["hash"]) == (
        "MISMATCH", "AllReduce", "f5ad75c18af8cf62")
    assert [(r["rank"], r["operation"], r["gpu"], r["pid"]) for r in warning["ranks"]] == [
        (0, 2, 0, 753), (1, 1, 1, 754)]
    assert ras.read_text(recorded("ncclras-v.txt")) == text  # -v added nothing in this state
    js = ras.read_json(recorded("ncclras.json"))
    assert js["nccl"] == "2.28.9"
    assert js["mismatches"] == {"0x" + warning["hash"]: {"AllReduce": {0: 2, 1: 1}}}
    assert [r["pid"] for r in js["communicators"][0]["ranks"]] == [753, 754]
    assert "rank 0: launched up to operation 2" in ras.render(text)


def test_ncclras_a_rank_line_of_another_form_stays_a_message():
    odd = recorded("ncclras.txt").replace("Rank 1 has launched up to operation 1",
                                          "Rank 1 is not responding")
    [warning] = ras.read_text(odd)["warnings"]
    assert [r["rank"] for r in warning["ranks"]] == [0]
    assert any(m.startswith("Rank 1 is not responding") for m in warning["messages"])


def test_nvidia_smi_gpu0_busy_gpu1_idle():
    rows = list(csv.reader(recorded("nvidia-smi.txt").splitlines(), skipinitialspace=True))
    assert rows[1][:2] == ["0", "100 %"] and rows[2][:2] == ["1", "0 %"]


# -- live: a gloo rank stuck in a collective -----------------------------------------------------

def rank0_waits_alone():
    import time

    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(4))  # rank 1 never calls it
    else:
        time.sleep(60)  # in Python, as the recorded GPU rank 1


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
@pytest.mark.timeout(60)
def test_live_native_dump_of_a_gloo_rank_in_all_reduce():
    with pytest.raises(dtlab.HangError) as ei:
        dtlab.run(rank0_waits_alone, nprocs=2, backend="gloo", timeout=1, native_stacks=True)
    e = ei.value
    assert "all_reduce" in e.stacks[0]  # the Python stacks are still Python stacks
    if e.native[0].startswith("no native stack captured"):
        pytest.skip(e.native[0])
    dump = pyspy.read(e.native[0])
    main = next(t for t in dump["threads"] if any(f["func"] == "all_reduce" for f in t["frames"]))
    funcs = [f["func"] for f in main["frames"]]
    # under the Python all_reduce: torch's C++ waiting for its work (c10d::Work::wait in torch
    # 2.13), in a condition variable of the C library
    waits = [i for i, f in enumerate(main["frames"])
             if f["library"] == "libtorch_cpu" and "wait" in f["func"].lower()]
    assert waits and waits[0] < funcs.index("all_reduce"), funcs
    assert main["runs"][0]["group"] == "C/C++ runtime"
    # gloo's own threads never run Python: the kernel lists them, py-spy does not
    shown = {t["tid"] for t in dump["threads"]}
    assert [t for t in e.threads[0] if t["tid"] not in shown]
    assert "py-spy did not show" in pyspy.render(dump, e.threads[0])


def test_no_native_stack_says_why_in_one_line(monkeypatch):
    from dtlab.runtime import stacks

    monkeypatch.setattr(stacks, "py_spy_path", lambda: None)
    native, threads = stacks.capture_native({0: os.getpid()})
    assert native == {0: "no native stack captured (py-spy --native: py-spy not installed)"}
    if os.path.isdir("/proc/self/task"):  # Linux: this process's own threads, this one among them
        assert os.getpid() in [t["tid"] for t in threads[0]]
