"""``python -m dtlab.check``: ``dtlab check`` on this machine -- or, started by torchrun on every
rank of every node, the check's cross-node part, which is :mod:`dtlab.multinode.check` (every
rank present, no two ranks on one GPU, all_reduce within a node and across nodes against the
NIC's line rate; its options: ``--json``, ``--out FILE``, ``--iters``, ``--bytes``)::

    python -m dtlab.check --level full                        # this machine, as `dtlab check`
    dtlab multinode script --nodes 2 --gpus-per-node 8 --entry "-m dtlab.check"   # the lines
    torchrun --nnodes 2 --node-rank $NODE --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint $MASTER:29400 -m dtlab.check --json    # what each node runs

One machine cannot be told apart from one node of many except by who started it: torchrun
sets ``TORCHELASTIC_RUN_ID`` and ``RANK`` for its ranks. dtlab's own ranks have them too (the
runtime plays torchrun's agent) but also ``DTLAB_BACKEND``, and never run this module.
"""

from __future__ import annotations

import os
import sys


def under_torchrun(env: dict[str, str]) -> bool:
    """Started as a rank of torchrun (or torch elastic), not by a person or by dtlab's runtime.

    >>> under_torchrun({"TORCHELASTIC_RUN_ID": "dtlab", "RANK": "3"})
    True
    >>> under_torchrun({"TORCHELASTIC_RUN_ID": "dtlab", "RANK": "3", "DTLAB_BACKEND": "nccl"})
    False
    """
    return "TORCHELASTIC_RUN_ID" in env and "RANK" in env and "DTLAB_BACKEND" not in env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if under_torchrun(dict(os.environ)):
        from ..multinode.check import main as cross_node

        return cross_node(argv)
    import argparse

    from . import cli  # the same arguments as `dtlab check` (dtlab/cli.py is above this package)

    p = argparse.ArgumentParser(prog="python -m dtlab.check",
                                description="dtlab check: is this machine ready for distributed "
                                            "training? (under torchrun: the cross-node part)")
    cli.add_arguments(p)
    args = p.parse_args(argv)
    try:
        cli.check(args)
    except ValueError as e:  # one line, exit 2, as `dtlab check` says it
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 2
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
