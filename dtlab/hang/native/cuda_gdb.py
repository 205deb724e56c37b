"""cuda-gdb attached to a stuck rank: every host thread, and the kernels on the GPU.

The commands (``scripts/gpu_native.sh`` ran them on 2x H100, ``data/h100x2-native/``)::

    cuda-gdb -q -batch -p PID -ex "info threads" -ex "thread apply all bt 25" \\
             -ex "info cuda kernels" -ex "info cuda devices" -ex detach

:func:`read` keeps what each table says, and nothing it does not: ``info threads`` (id, LWP,
name, current frame), the backtraces, ``info cuda kernels`` (device, grid, status, SM mask,
grid and block dimensions, the kernel) and ``info cuda devices``; every other line goes to
``unparsed`` (gdb's own messages: attaching, new threads, detaching).
"""

from __future__ import annotations

import re

# '  4    Thread 0x7ff3fa1db6c0 (LWP 771) "pt_nccl_watchdg" 0x00007ff6c5e98e51 in ?? () from /lib/...'
_INFO_THREAD = re.compile(r'^(?P<cur>\*)?\s*(?P<id>\d+)\s+Thread (?P<addr>0x[0-9a-f]+) \(LWP (?P<lwp>\d+)\)'
                          r'(?: "(?P<name>[^"]*)")?\s+(?P<frame>\S.*?)\s*$')
# 'Thread 4 (Thread 0x7ff3fa1db6c0 (LWP 771) "pt_nccl_watchdg"):'
_BT_HEAD = re.compile(r'^Thread (?P<id>\d+) \(Thread 0x[0-9a-f]+ \(LWP (?P<lwp>\d+)\)(?: "[^"]*")?\):$')
# '#2  0x00007ff610306972 in c10d::...::runLoop() () from /x/libtorch_cuda.so'
# '#1  0x00007ff64109bc92 in ncclProxyService (_args=0x19aab900) at proxy.cc:1645'
# '#0  __futex_abstimed_wait_common64 (private=0, ...) at ./nptl/futex-internal.c:57'
_BT_FRAME = re.compile(r"^#(?P<n>\d+)\s+(?:(?P<pc>0x[0-9a-f]+) in )?(?P<func>.+?) \(.*?\)"
                       r"(?: at (?P<source>\S+:\d+))?(?: from (?P<lib>\S+))?\s*$")
_FRAME_FUNC = re.compile(r"^(?:0x[0-9a-f]+ in )?(?P<func>.+?) \(.*?\)(?: at (?P<source>\S+))?"
                         r"(?: from (?P<lib>\S+))?$")
_KERNELS_HEAD = re.compile(r"^\s+Kernel\s+Parent\s+Dev\s+Grid\s+Status\s+SMs Mask\s+GridDim\s+BlockDim"
                           r"\s+Invocation\s*$")
_KERNEL = re.compile(r"^(?P<cur>\*)?\s+(?P<kernel>\d+)\s+(?P<parent>\S+)\s+(?P<dev>\d+)\s+(?P<grid>\d+)"
                     r"\s+(?P<status>\w+)\s+(?P<mask>0x[0-9a-f]+)\s+\((?P<gd>\d+,\d+,\d+)\)"
                     r"\s+\((?P<bd>\d+,\d+,\d+)\)\s+(?P<invocation>\S.*?)\s*$")
_DEVICES_HEAD = re.compile(r"^\s+Dev\s+PCI Bus/Dev ID\s+Name\s+Description\s+SM Type\s+SMs\s+Warps/SM"
                           r"\s+Lanes/Warp\s+Max Regs/Lane\s+Active SMs Mask\s*$")
_DEVICE = re.compile(r"^(?P<cur>\*)?\s+(?P<dev>\d+)\s+(?P<pci>[0-9a-f]+:[0-9a-f]+\.\d+)\s+(?P<middle>\S.*?)"
                     r"\s+(?P<sm>sm_\d+)\s+(?P<sms>\d+)\s+(?P<warps>\d+)\s+(?P<lanes>\d+)"
                     r"\s+(?P<regs>\d+)\s+(?P<mask>0x[0-9a-f]+)\s*$")
# '[Switching focus to CUDA kernel 0, grid 4, ..., device 0, sm 0, warp 1, lane 0]', then the
# device function that GPU thread is in: '0x00007ff3cbfd2380 in ncclDevFunc_AllReduce_...() ()'
_FOCUS = re.compile(r"^\[Switching focus to (?P<focus>CUDA kernel .*)\]$")
_FOCUS_FRAME = re.compile(r"^0x[0-9a-f]+ in (?P<func>\S+?)(?:\(\))? \(.*\)$")
# the runtime's own libraries: a thread is named by its first frame outside them
_PLUMBING = re.compile(r"/(libc|libpthread|libstdc\+\+)\.so|^\?\?$")


def _frame(func: str, source: str | None, lib: str | None) -> dict:
    return {"func": None if func == "??" else func, "source": source, "library": lib}


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def read(text: str) -> dict:
    """cuda-gdb's batch output as plain data: ``threads`` (``id``, ``lwp``, ``name``,
    ``current``, ``frame``, ``backtrace`` innermost first, ``runs``: the first named function
    outside libc/libstdc++, the best one-word answer to "what is this thread?"; ``runs_in`` the
    first library outside them; ``waits_in`` the innermost named frame), ``kernels``,
    ``devices``, ``focus`` (the GPU thread gdb stopped on) and ``focus_function`` (the device
    function that thread was in), ``unparsed``."""
    out: dict = {"threads": [], "kernels": [], "devices": [], "focus": None,
                 "focus_function": None, "unparsed": []}
    by_id: dict[int, dict] = {}
    bt: list | None = None
    devices_header = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if (m := _INFO_THREAD.match(line)) and bt is None:
            fm = _FRAME_FUNC.match(m["frame"])
            t = {"id": int(m["id"]), "lwp": int(m["lwp"]), "name": m["name"],
                 "current": bool(m["cur"]), "frame": _frame(fm["func"], fm["source"], fm["lib"])
                 if fm else {"func": None, "source": None, "library": None, "text": m["frame"]},
                 "backtrace": []}
            out["threads"].append(t)
            by_id[t["id"]] = t
        elif (m := _BT_HEAD.match(line)) and int(m["id"]) in by_id:
            bt = by_id[int(m["id"])]["backtrace"]
        elif (m := _BT_FRAME.match(line)) and bt is not None:
            bt.append(_frame(m["func"], m["source"], m["lib"]))
        elif _KERNELS_HEAD.match(line):
            bt = None
        elif m := _KERNEL.match(line):
            mask = int(m["mask"], 16)
            out["kernels"].append({
                "kernel": int(m["kernel"]), "parent": None if m["parent"] == "-" else m["parent"],
                "device": int(m["dev"]), "grid": int(m["grid"]), "status": m["status"],
                "sms_mask": m["mask"], "sms": bin(mask).count("1"), "grid_dim": _dims(m["gd"]),
                "block_dim": _dims(m["bd"]), "invocation": m["invocation"],
                "current": bool(m["cur"])})
        elif _DEVICES_HEAD.match(line):
            bt, devices_header = None, line
        elif (m := _DEVICE.match(line)) and devices_header is not None:
            # Name and Description are right-aligned under their headers; both may hold spaces
            end = devices_header.index(" Name") + len(" Name")
            name, description = line[:end].split(m["pci"], 1)[-1].strip(), line[end:m.start("sm")].strip()
            mask = int(m["mask"], 16)
            out["devices"].append({
                "device": int(m["dev"]), "pci": m["pci"], "name": name, "description": description,
                "sm_type": m["sm"], "sms": int(m["sms"]), "warps_per_sm": int(m["warps"]),
                "lanes_per_warp": int(m["lanes"]), "max_regs_per_lane": int(m["regs"]),
                "active_sms_mask": m["mask"], "active_sms": bin(mask).count("1"),
                "current": bool(m["cur"])})
        elif m := _FOCUS.match(line):
            out["focus"] = m["focus"]
        elif (m := _FOCUS_FRAME.match(line)) and out["focus"] and not out["focus_function"]:
            out["focus_function"] = m["func"]
        else:
            out["unparsed"].append(line)
    for t in out["threads"]:
        own = [f for f in t["backtrace"] if not (f["library"] and _PLUMBING.search(f["library"]))]
        t["runs"] = next((f["func"] for f in own if f["func"]), None)
        t["runs_in"] = next((f["library"] for f in own if f["library"]), None)
        t["waits_in"] = next((f["func"] for f in t["backtrace"] if f["func"]), None)
    return out


def render(gdb: dict) -> str:
    """The host threads (name, what each runs, where it waits) and the GPU's kernels."""
    lines = [f"host threads: {len(gdb['threads'])}"]
    for t in sorted(gdb["threads"], key=lambda t: t["id"]):
        runs = t["runs"] or (f"unnamed code in {_base(t['runs_in'])}" if t["runs_in"] else "?")
        lines.append(f"  {t['id']:>3} LWP {t['lwp']:<6} {t['name'] or '?':<16} runs "
                     f"{_short(runs):<48} waits in {t['waits_in'] or '?'}")
    lines.append(f"GPU kernels: {len(gdb['kernels'])}")
    for k in gdb["kernels"]:
        lines.append(f"  device {k['device']}: {k['invocation']} {k['status']}, grid "
                     f"{k['grid_dim']} x block {k['block_dim']}, on {k['sms']} SMs "
                     f"({k['sms_mask']})")
    if gdb["focus_function"]:
        lines.append(f"  stopped on one GPU thread ({gdb['focus']}), in {gdb['focus_function']}")
    for d in gdb["devices"]:
        lines.append(f"  device {d['device']} {d['name']} ({d['sm_type']}, {d['sms']} SMs): "
                     f"{d['active_sms']} SMs active")
    return "\n".join(lines)


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _short(func: str, width: int = 48) -> str:
    return func if len(func) <= width else func[:width - 1] + "…"
