"""Bandwidth: what nccl-tests measures, measured from torch.distributed, and read from its logs.

* :func:`algbw` / :func:`busbw` -- nccl-tests' formulas (doc/PERFORMANCE.md), in GB/s;
* :func:`sweep` -- a nccl-tests-style sweep over sizes and collectives on N ranks (NCCL with
  CUDA events on GPUs, gloo on CPUs): a :class:`SweepResult`, its ``frame`` a DataFrame with
  nccl-tests' columns (its settings: a :class:`SweepConfig`);
* :func:`parse_nccl_tests` -- ``all_reduce_perf`` & co. output as JSON-ready data;
* :func:`render_text`, :func:`to_frame`, :func:`plot` -- print, compare and draw either;
* :func:`fit` -- alpha (us) and beta (GB/s) of a sweep; :func:`timing_pitfalls` -- one
  collective timed five ways; ``sweep(..., graph=True)`` -- CUDA-graph replay (graph.py);
* :func:`p2p_matrix`, :func:`slow_pairs`, :func:`plot_p2p` -- GPU-pair copies;
  :func:`bucketing` -- one big all-reduce vs buckets; :func:`plot_ceiling` -- links, NCCL's
  topology figures and measured busbw in one picture.

>>> import dtlab.bench as bench
>>> round(bench.busbw("all_reduce", 1 << 30, 3279.91e-6, nranks=2), 2)
327.37
>>> res = bench.sweep("all", min_bytes="1K", max_bytes="64K", nprocs=2, backend="gloo")  # doctest: +SKIP
>>> nt = bench.to_frame("data/h200x2-nccl-tests/nt_all_reduce.txt")                     # doctest: +SKIP
>>> bench.plot([res, nt], link_limit_gbps=450, link_label="NVLink4 x18: 450 GB/s/dir")  # doctest: +SKIP

Terminal: ``dtlab bench --op all -b 8 -e 128M`` and ``dtlab nccl-tests FILE [--json]``.
"""

from .engine import FRAME_COLUMNS, render_text, rows_to_frame, sweep, to_frame, to_reports
from .result import SweepConfig, SweepResult
from .formulas import (OPS, algbw, busbw, busbw_factor, canonical_op, coll_shape, format_size,
                       parse_size, sweep_sizes)
from .nccl_tests import parse_nccl_tests, parse_nccl_tests_all
from .plot import plot
from .report import render_report, summary_text
from .fit import Fit, fit
from .pitfalls import timing_pitfalls
from .p2p import p2p_matrix, plot_p2p, slow_pairs, to_matrix
from .bucketing import bucket_time_us, bucketing
from .ceiling import ceiling_lines, data_rate, nccl_topology, nvlink_rates, plot_ceiling

__all__ = ["OPS", "FRAME_COLUMNS", "algbw", "busbw", "busbw_factor", "canonical_op",
           "coll_shape", "format_size", "parse_size", "sweep_sizes", "sweep", "SweepResult",
           "SweepConfig", "to_frame",
           "to_reports", "rows_to_frame", "render_text", "render_report", "parse_nccl_tests",
           "parse_nccl_tests_all", "plot", "summary_text", "Fit", "fit", "timing_pitfalls",
           "p2p_matrix", "plot_p2p", "slow_pairs", "to_matrix", "bucketing", "bucket_time_us",
           "ceiling_lines", "data_rate", "nccl_topology", "nvlink_rates", "plot_ceiling"]
