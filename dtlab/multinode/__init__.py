"""Section 04, multi-node: launch on a real cluster, rehearse on one machine, break it, diagnose.

Contract, one module per step of the section (notebooks/04_multinode.ipynb):

* :mod:`.script` -- the torchrun line for every node, or an sbatch script (``dtlab multinode
  script``); :mod:`.check` -- ``python -m dtlab.multinode.check``, what such a launch runs first;
  :mod:`.world` -- ``check_world``: missing ranks, duplicates, wrong local ranks in a rank table;
* :mod:`.simulate` -- real torchrun agents, one per simulated node, each in its own network
  namespace (:mod:`.netns`), started and stopped by :mod:`dtlab.runtime.agents`; :mod:`.agent`
  -- torchrun as a simulated node runs it (stores on 127.0.0.1 only, the host leaving last);
  :mod:`.faults` -- what can be broken on purpose; :mod:`.diagnose` -- naming it from consoles.

::

    dtlab multinode script --nodes 2 --gpus-per-node 8 --slurm > job.sh
    sudo dtlab multinode simulate --nodes 2 --procs-per-node 2 --json
    sudo dtlab multinode simulate --fault blocked_port
"""

from .world import check_world

__all__ = ["check_world"]
