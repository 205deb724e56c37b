"""``dtlab course autograde --slurm-script``: the script it prints, run for real on this machine
with stand-ins for sbatch and srun that run each array task (and then the dependent merge job)
here, in order, as Slurm would on its nodes."""

import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from dtlab import course
from students import solved

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

# sbatch: the job script from stdin; an array job runs once per index with SLURM_ARRAY_TASK_ID,
# a dependent job runs at once (the stand-in runs everything synchronously); prints a job id
FAKE_SBATCH = r'''#!/usr/bin/env bash
array=""; out=/dev/null
for a in "$@"; do
  case "$a" in
    --array=*) array=${a#--array=}; array=${array%%%*} ;;
    --output=*) out=${a#--output=} ;;
  esac
done
script=$(mktemp); cat > "$script"; echo "$@" >> "$SBATCH_LOG"
if [ -n "$array" ]; then
  for i in $(seq ${array%-*} ${array#*-}); do
    SLURM_ARRAY_TASK_ID=$i bash "$script" > "${out//%a/$i}" 2>&1 || echo "task $i failed" >> "$SBATCH_LOG"
  done
else
  bash "$script" > "$out" 2>&1 || echo "job failed" >> "$SBATCH_LOG"
fi
echo $RANDOM
'''
FAKE_SRUN = '#!/usr/bin/env bash\nexec "$@"\n'


def test_the_script_grades_each_submission_as_a_task_then_merges(tmp_path, no_orphans):
    root, inbox = tmp_path / "course", tmp_path / "inbox"
    course.release(root=str(root), assignments=["03_topology"])
    rel = root / "release" / "03_topology" / "03_topology.ipynb"
    src = root / "source" / "03_topology" / "03_topology.ipynb"
    for student, nb in (("hana", solved(str(rel), str(src))), ("eli", nbformat.read(str(rel), 4))):
        (inbox / student / "03_topology").mkdir(parents=True)
        nbformat.write(nb, str(inbox / student / "03_topology" / "03_topology.ipynb"))
    db = "sqlite:///" + str(tmp_path / "grades.db")
    p = subprocess.run([sys.executable, "-m", "dtlab", "course", "autograde", str(inbox),
                        "--root", str(root), "--db", db, "--slurm-script"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    script = p.stdout
    assert "--array=0-1%" in script and "--dependency=afterany:" in script
    assert not (root / "graded").exists()  # printing the script grades nothing
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SBATCH_LOG": str(tmp_path / "log")}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "log").read_text()
    assert "failed" not in log, log + "".join(f.read_text() for f in (root / "slurm").iterdir())
    df = course.report(root=str(root), db=db)
    assert dict(zip(df.student, df.score)) == {"hana": 6.0, "eli": 0.0}
    assert not list((root / "graded").glob(".session-*"))  # the merge job cleaned up
    shutil.rmtree(tmp_path / "inbox")
