"""How are the GPUs connected, and what does that predict? (Section 03, notebook 03_topology.)

Contract: every reader returns one plain-data *topology* dict -- ``devices``, ``gpus``, ``nics``,
``nic_names``, ``links`` {(a, b): kind}, ``affinity``, ``numa`` -- whatever it was read from, so the
predictions below work on all of them:

* :func:`parse_topo_matrix` -- ``nvidia-smi topo -m`` text (``matrix.py``)
* :func:`parse_nccl_topo` -- NCCL's topology XML, ``NCCL_TOPO_DUMP_FILE`` (``nccl_xml.py``)
* :func:`load` -- a file of either kind; :func:`local` -- this machine (nvidia-smi, NVML, torch)
* :func:`predict_pairs` -- each GPU pair's transport (P2P/NVLink, P2P/PCIe, SHM) and bandwidth
  class; :func:`nearest_nics`; :func:`ring_bottleneck`; :func:`reconcile` against a measured
  P2P matrix (``predict.py``); :func:`parse_p2p_bandwidth_test` reads CUDA's
  ``p2pBandwidthLatencyTest`` output.

From a terminal::

    dtlab topo                    # this machine: nvidia-smi topo -m, NVML, torch peer access
    dtlab topo FILE [--json]      # a saved matrix or NCCL XML dump

>>> t = load("data/topologies/dgx1-8xv100-pytorch-ddp-readme-topo.txt")
>>> ring_bottleneck(t, ["GPU%d" % i for i in range(8)])["hop"]
['GPU3', 'GPU4']
"""

from .matrix import LINK_RANK, link_kind, link_order, parse_topo_matrix
from .nccl_xml import parse_nccl_topo, pcie_gbps
from .live import local, nvidia_smi_topo, nvml_facts, peer_access
from .predict import (nearest_nics, parse_p2p_bandwidth_test, predict_pairs, reconcile,
                      ring_bottleneck, slowest_pairs)
from .report import gpu_rows, load, parse, provenance, render, to_json

__all__ = ["LINK_RANK", "link_kind", "link_order", "parse_topo_matrix", "parse_nccl_topo",
           "pcie_gbps", "local", "nvidia_smi_topo", "nvml_facts", "peer_access", "predict_pairs",
           "nearest_nics", "ring_bottleneck", "slowest_pairs", "reconcile",
           "parse_p2p_bandwidth_test", "load", "parse", "render", "to_json", "gpu_rows",
           "provenance"]
