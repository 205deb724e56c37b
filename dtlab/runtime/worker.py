"""The rank side: one process per rank (forked from the rank zygote, or a fresh interpreter),
started by :mod:`dtlab.runtime.procs`.

``python -m dtlab.runtime.worker oneshot RUN_DIR``          run one call, write its result, exit
``python -m dtlab.runtime.worker serve RUN_DIR SOCKET``     serve a :class:`dtlab.Pool` until closed

Both modes share one init/cleanup path (:mod:`.rankside`). What a one-shot rank leaves in
RUN_DIR for the parent (dtlab/runtime/README.md, "The run folder"): ``result-<rank>.pkl`` with the value,
the time spent in ``fn``, when it returned and how many collectives it had issued -- or, when it
fails, torch elastic's error file and a Flight Recorder dump.
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle

from . import guard, rankside
from .evidence import dump_own_trace


def oneshot(run_dir: str) -> None:
    rank = int(os.environ["RANK"])
    joined = False
    try:
        with open(os.path.join(run_dir, "call.pkl"), "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        rankside.init_process_group()
        joined = True
        rankside.mark_entered(run_dir, rank)  # the parent's timeout= counts from every rank's mark
        t0 = time.perf_counter()
        value = fn(*args, **kwargs)
        duration = time.perf_counter() - t0
        result = {"value": value, "duration_s": duration, "end_ns": time.time_ns(),
                  "collectives": rankside.collectives_issued()}
        try:
            rankside.dump_value(result, os.path.join(run_dir, f"result-{rank}.pkl"))
        except Exception as pe:
            raise TypeError(f"fn returned {type(value).__name__} on rank {rank}, which cannot be "
                            f"sent back to the parent ({pe}); return plain data, tensors or "
                            f"arrays instead") from None
    except SystemExit as e:  # sys.exit() inside fn: exit with that code, as a script would
        if e.code not in (None, 0):
            rankside.record_failure(e)  # says which call, and keeps sys.exit("text")'s text
        rankside.finish(e.code if isinstance(e.code, int) else 0 if e.code is None else 1,
                        destroy=False)
    except BaseException as e:
        rankside.record_failure(e)
        dump_own_trace(rank)  # the collectives this rank issued, for the post-mortem
        rankside.finish(1, destroy=False)
    rankside.finish(0, destroy=joined)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    mode, run_dir = argv[0], argv[1]
    parent = guard.start(run_dir)  # from here on, this process is the rank; its parent guards it
    rankside.bootstrap(run_dir, parent)
    if mode == "oneshot":
        oneshot(run_dir)
    elif mode == "serve":
        from .serve import serve

        serve(run_dir, *argv[2:])
    else:
        raise SystemExit(f"dtlab worker: unknown mode {mode!r}")


def forked(*argv: str) -> None:
    """:func:`main` in a rank forked from the rank zygote (:mod:`.procs`): first what a fresh
    interpreter takes from the rank's environment as it imports torch, and the zygote took from
    its own -- ``TORCH_DISTRIBUTED_DEBUG`` -- then ``sys.argv`` and a process name that says
    what it is (``ps -o comm``, ``top``: ``dtlab-rank0``)."""
    import torch.distributed as dist

    sys.argv = [__file__, *argv]
    if dist.is_available():
        dist.set_debug_level_from_env()
    _name(f"dtlab-rank{os.environ.get('RANK', '')}")
    main(list(argv))


def _name(name: str) -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 -- a name is a nicety
        pass


if __name__ == "__main__":
    main()
