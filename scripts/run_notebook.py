"""Execute one notebook headless and say which cells raised: for GPU machines, where the test
suite's notebook run is not installed (carry nbclient/ipykernel as wheels; see scripts/gpu_sections.sh).

    DTLAB_OUTPUT=lines python3 scripts/run_notebook.py notebooks/01_collectives.ipynb OUT.txt

OUT.txt gets every cell's text output; the exit status is the number of cells that raised
(cells tagged raises-exception are expected to raise), 0 when the notebook ran clean.
"""
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

path, out = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": os.path.dirname(path)}})
try:
    client.execute()
except CellExecutionError as e:  # allow_errors=True: only a kernel death gets here
    print("kernel:", e)
bad = 0
with open(out, "w") as f:
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            f.write(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) + "\n")
            if o.get("output_type") == "error":
                expected = "raises-exception" in cell.metadata.get("tags", [])
                bad += not expected
                f.write(f"[cell {i}] {o['ename']}: {o['evalue']}{' (expected)' if expected else ''}\n")
print(f"{path}: {bad} cell(s) raised")
sys.exit(min(bad, 100))
