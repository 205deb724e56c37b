"""02_bandwidth's graded exercises grade the skill: known shortcuts fail their test cells (hidden
tests included), the source's solutions pass. Uses test_shortcuts' machinery. Run:
pytest tests/grading/test_shortcuts_02.py"""

from __future__ import annotations

import pytest

from conftest import assert_no_descendants
from test_shortcuts import CONTEXT, fails, grade

IMPORTS_02 = ("import os\nimport numpy as np\nimport pandas as pd\nimport dtlab.bench as bench\n"
              "from dtlab import course\nfrom dtlab.course.recorded import data_root\n"
              "DATA = data_root()\n"
              "NT_ALL_REDUCE = os.path.join(DATA, 'h200x2-nccl-tests', 'nt_all_reduce.txt')\n")


def _context_02(c):
    """The imports and paths of the setup cell, and the example matrix slow_pairs' test uses."""
    example = next(s for s in c.values() if s.startswith("EXAMPLE = "))
    return IMPORTS_02 + example.split("\nbench.plot_p2p")[0] + "\n"


CONTEXT["02_bandwidth"] = _context_02

SHORTCUTS = {
    ("fit_alpha_beta", "the library's fit"): '''
def fit_alpha_beta(sizes, times_us):
    df = pd.DataFrame({"op": "all_reduce", "nranks": 2, "size": sizes, "oop_time_us": times_us,
                       "ip_time_us": np.nan})
    f = bench.fit(df)
    return f.alpha_us, f.beta_GBps
''',
    ("fit_alpha_beta", "one least-squares line (polyfit)"): '''
def fit_alpha_beta(sizes, times_us):
    slope, intercept = np.polyfit(np.asarray(sizes, float), np.asarray(times_us, float), 1)
    return float(intercept), float(1 / slope / 1e3)
''',
    ("fit_alpha_beta", "least squares on relative error"): '''
def fit_alpha_beta(sizes, times_us):
    s, t = np.asarray(sizes, float), np.asarray(times_us, float)
    a, b = np.linalg.lstsq(np.stack([np.ones_like(s), s], 1) / t[:, None], np.ones_like(t),
                           rcond=None)[0]
    return float(a), float(1 / b / 1e3)
''',
    ("fit_alpha_beta", "the visible answer hard-coded"): '''
def fit_alpha_beta(sizes, times_us):
    return 17.7, 308.5
''',
    ("fit_alpha_beta", "the first and last point"): '''
def fit_alpha_beta(sizes, times_us):
    slope = (times_us[-1] - times_us[0]) / (sizes[-1] - sizes[0])
    return float(times_us[0]), float(1 / slope / 1e3)
''',
    ("fit_alpha_beta", "the recorded sweep read from data/"): '''
def fit_alpha_beta(sizes, times_us):
    import glob
    for path in glob.glob(os.path.join(DATA, "*", "*.txt")):
        open(path).read()
    return 17.7, 308.5
''',
    ("slow_pairs", "the library's slow_pairs"): '''
def slow_pairs(matrix, fraction=0.75):
    return bench.slow_pairs(matrix, fraction=fraction)
''',
    ("slow_pairs", "the mean instead of the median"): '''
def slow_pairs(matrix, fraction=0.75):
    vals = [v for i, r in enumerate(matrix) for j, v in enumerate(r) if i != j and v is not None]
    cut = fraction * sum(vals) / len(vals)
    return [[i, j] for i, r in enumerate(matrix) for j, v in enumerate(r)
            if i != j and v is not None and v < cut]
''',
    ("slow_pairs", "the maximum instead of the median"): '''
def slow_pairs(matrix, fraction=0.75):
    vals = [v for i, r in enumerate(matrix) for j, v in enumerate(r) if i != j and v is not None]
    cut = fraction * max(vals)
    return [[i, j] for i, r in enumerate(matrix) for j, v in enumerate(r)
            if i != j and v is not None and v < cut]
''',
    ("slow_pairs", "the visible answer hard-coded"): '''
def slow_pairs(matrix, fraction=0.75):
    return sorted([[i, 5] for i in range(8) if i != 5] + [[5, j] for j in range(8) if j != 5])
''',
    ("slow_pairs", "unordered pairs"): '''
def slow_pairs(matrix, fraction=0.75):
    vals = sorted(v for i, r in enumerate(matrix) for j, v in enumerate(r) if i != j and v is not None)
    med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
    return sorted({tuple(sorted((i, j))) for i, r in enumerate(matrix) for j, v in enumerate(r)
                   if i != j and v is not None and v < fraction * med})
''',
}


@pytest.mark.parametrize("case", list(SHORTCUTS), ids=lambda c: "/".join(c))
def test_02_shortcut_fails(case):
    fails("02_bandwidth", case[0], SHORTCUTS[case])
    assert_no_descendants()


@pytest.mark.parametrize("exercise", ["fit_alpha_beta", "slow_pairs"])
def test_02_solution_passes(exercise):
    grade("02_bandwidth", exercise)
    assert_no_descendants()
