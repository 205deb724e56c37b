"""This machine's topology, from the three places that know it: ``nvidia-smi topo -m``, NVML
(through ``pynvml`` from the nvidia-ml-py package, when installed) and torch's peer-access query.
Each is optional: without a GPU, nvidia-smi or pynvml the facts it would give are absent, not
invented. Run ``dtlab topo`` (or ``dtlab topo --json``) on a GPU machine.
"""

from __future__ import annotations

import shutil
import subprocess


def nvidia_smi(*args: str, timeout: float = 20) -> str | None:
    """``nvidia-smi ARGS`` output, or None without nvidia-smi (or when it fails)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return p.stdout if p.returncode == 0 else None


def nvidia_smi_topo() -> str | None:
    """``nvidia-smi topo -m`` output, or None without nvidia-smi (or when it fails)."""
    return nvidia_smi("topo", "-m")


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 -- NVMLError_NotSupported & co: the fact is unknown
        return None


def nvml_facts() -> list[dict] | None:
    """Per GPU, from NVML: name, bus id, NUMA node, PCIe generation and width (current and max),
    active NVLinks with version and remote bus id, and the per-link speed (MB/s) where the driver
    reports it. None when pynvml is missing or NVML does not start."""
    try:
        import pynvml as nv
    except ImportError:
        return None
    try:
        nv.nvmlInit()
    except Exception:  # noqa: BLE001 -- no driver, no GPU
        return None
    try:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pci = _call(nv.nvmlDeviceGetPciInfo, h)
            bus = pci.busId.decode() if pci is not None and isinstance(pci.busId, bytes) else \
                getattr(pci, "busId", None)
            name = _call(nv.nvmlDeviceGetName, h)
            links = []
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                state = _call(nv.nvmlDeviceGetNvLinkState, h, link)
                if not state:
                    continue
                remote = _call(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                rbus = getattr(remote, "busId", None)
                links.append({"link": link, "version": _call(nv.nvmlDeviceGetNvLinkVersion, h, link),
                              "remote": rbus.decode() if isinstance(rbus, bytes) else rbus})
            speed = None
            field = getattr(nv, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", None)
            if field is not None and links:
                values = _call(nv.nvmlDeviceGetFieldValues, h, [field])
                if values and not values[0].nvmlReturn:
                    speed = values[0].value.uiVal
            numa = _call(getattr(nv, "nvmlDeviceGetNumaNodeId", lambda h: None), h)
            if numa is None and bus:
                numa = _sysfs_numa(bus)
            out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                        "busid": bus, "numa": numa,
                        "pcie_gen": _call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                        "pcie_width": _call(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                        "pcie_max_gen": _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                        "pcie_max_width": _call(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                        "nvlinks": links, "nvlink_speed_mbps": speed})
        return out
    finally:
        _call(nv.nvmlShutdown)


def _sysfs_numa(bus: str) -> int | None:
    """The kernel's NUMA node of a PCI device (-1 = none)."""
    path = f"/sys/bus/pci/devices/{bus.lower()[-12:]}/numa_node"
    try:
        with open(path) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def peer_access() -> list[list[bool]] | None:
    """``torch.cuda.can_device_access_peer(i, j)`` for every pair (the diagonal True), or None
    without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = torch.cuda.device_count()
    return [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
            for i in range(n)]


def local() -> dict:
    """This machine's topology (:func:`dtlab.topology.parse_topo_matrix` of ``nvidia-smi topo
    -m``) with ``nvml`` and ``peer_access`` added; ValueError when nvidia-smi is not here."""
    from .matrix import parse_topo_matrix

    text = nvidia_smi_topo()
    if text is None:
        raise ValueError("no nvidia-smi on this machine (or it failed): give a saved "
                         "`nvidia-smi topo -m` output or an NCCL topology XML, dtlab topo FILE")
    topo = parse_topo_matrix(text)
    topo["nvml"] = nvml_facts()
    topo["peer_access"] = peer_access()
    return topo
