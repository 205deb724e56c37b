"""``dtlab course autograde SUBMISSIONS --slurm-script``: grading a class on a Slurm cluster.

Grading one submission is a self-contained command (``dtlab course grade``: its notebook in,
``result.json`` and the graded notebook out, nothing shared), so a scheduler can fan it out.
The script this prints, run on a login node (``bash grade.sh``), submits

1. an **array job**, one task per submission, each running ``dtlab course grade`` on a node of
   its own (each task sandboxes its own learner code, as on one machine);
2. a **merge job** that starts when the array is done (``--dependency=afterany``: a failed task
   is reported by the merge, not left waiting) and records every result in the gradebook
   (``dtlab course merge``).

The course root, the submissions and this Python environment must be on a filesystem every node
sees; each node needs bubblewrap and user namespaces (grading/README.md). GNU parallel or a
Kubernetes Job can run the same ``dtlab course grade`` lines (grading/README.md shows both).
"""

from __future__ import annotations

import os
import shlex
import sys

from .grade import CPU_S, TIMEOUT_S


def script(submissions: str, *, root: str | None = None, db: str | None = None,
           notebooks: str | None = None, timeout: float = TIMEOUT_S, cpu_s: float = CPU_S,
           isolate: bool = True, concurrent: int = 32, mem: str = "8G",
           time_limit: str = "02:00:00") -> str:
    """The bash script (see the module); checks the submissions' layout first."""
    import secrets

    from .graded import CACHE_ENV, SEED_ENV
    from .layout import course_root, scan_submissions, sync

    root = course_root(root)
    known = sync(root, notebooks)
    inbox = os.path.abspath(submissions)
    pairs = scan_submissions(inbox, known)
    results = os.path.join(root, "graded")
    q = shlex.quote
    dtlab = f"{q(sys.executable)} -m dtlab"
    extra = f" --timeout {timeout!r} --cpu-limit {cpu_s!r}" + ("" if isolate else
                                                              " --unsafe-no-sandbox")
    listing = " ".join(q(f"{s}/{a}") for s, a in pairs)
    db_flag = f" --db {q(db)}" if db else ""
    logs = os.path.join(root, "slurm")
    seed = secrets.token_hex(8)  # one grading session: hidden inputs drawn and made once
    session = os.path.join(results, f".session-{seed}")
    return f"""#!/usr/bin/env bash
# dtlab course autograde --slurm-script: {len(pairs)} submission(s) of {q(inbox)},
# graded one per Slurm array task (dtlab course grade), then merged into the gradebook.
# Run it on a login node: bash THIS_FILE. Paths must be visible on every node.
set -euo pipefail
mkdir -p {q(logs)} {q(results)}
array=$(sbatch --parsable --job-name=dtlab-grade --array=0-{len(pairs) - 1}%{concurrent} \\
        --cpus-per-task=2 --mem={mem} --time={time_limit} \\
        --output={q(os.path.join(logs, "grade-%A_%a.out"))} <<'EOS'
#!/usr/bin/env bash
set -euo pipefail
INBOX={q(inbox)}
ROOT={q(root)}
RESULTS={q(results)}
export {SEED_ENV}={seed} {CACHE_ENV}={q(session)}
PAIRS=({listing})
PAIR=${{PAIRS[$SLURM_ARRAY_TASK_ID]}}
S=${{PAIR%%/*}}
A=${{PAIR#*/}}
srun {dtlab} course grade "$INBOX/$S/$A/$A.ipynb" --assignment "$A" --student "$S" \\
     --source "$ROOT/source/$A/$A.ipynb" --out "$RESULTS/$S/$A"{extra}
EOS
)
merge=$(sbatch --parsable --job-name=dtlab-merge --dependency=afterany:"$array" \\
        --cpus-per-task=1 --mem=4G --time=01:00:00 \\
        --output={q(os.path.join(logs, "merge-%j.out"))} <<'EOS'
#!/usr/bin/env bash
set -euo pipefail
{dtlab} course merge --root {q(root)} --submissions {q(inbox)} --results {q(results)}{db_flag}
rm -rf {q(session)}
EOS
)
echo "grading: array job $array ({len(pairs)} task(s)); merge: job $merge, after it"
echo "logs: {logs}/; then: {sys.executable} -m dtlab course report --root {root}{db_flag}"
"""
