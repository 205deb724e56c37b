"""dtlab.bench.fit on every recorded real sweep: fitted on sizes <= 256 MiB, it predicts the
1 GiB time within 15 % and the smallest size's within 25 % (the issue's bar), with the two
recorded exceptions named and bounded below. Run: pytest tests/bench/test_fit.py"""

import math
import os

import numpy as np
import pandas as pd
import pytest

import dtlab.bench as bench
from dtlab.bench.fit import ring_steps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NT = [os.path.join(ROOT, "data", "h200x2-nccl-tests", f) for f in ("nt_all_reduce.txt", "nt_broadcast.txt")]
NT += [p for p in (os.path.join("/work/shared/data/h200x2-nccl-tests", f)
                   for f in ("nt_all_reduce.txt", "nt_broadcast.txt")) if os.path.exists(p)]
DTLAB = os.path.join(ROOT, "data", "h200x2-dtlab-bench", "bandwidth_gpu.csv")

# Where the recorded data itself defeats a two-parameter model (measured, not tuned away):
# dtlab sendrecv gains 18 % busbw between 256 MiB and 512 MiB (300 -> 354 GB/s), beyond any
# slope seen up to 256 MiB; its 8 B out-of-place row took 76 us where 16 B .. 4 MiB took ~50.
KNOWN = {("sendrecv", "ip", "large"): 0.20, ("sendrecv", "oop", "small"): 0.40}


def sweeps():
    out = []
    for path in NT:
        df = bench.to_frame(path)
        for col in ("oop", "ip"):
            out.append((f"{os.path.basename(os.path.dirname(path))}/{df['op'][0]}/{col}", df, col))
    df = bench.to_frame(DTLAB)
    for op, part in df.groupby("op"):
        for col in ("oop", "ip"):
            if part[f"{col}_time_us"].notna().any():
                out.append((f"dtlab/{op}/{col}", part, col))
    return out


SWEEPS = sweeps()


@pytest.mark.parametrize("name,df,col", SWEEPS, ids=[s[0] for s in SWEEPS])
def test_fit_below_256M_predicts_1G_and_the_smallest_size(name, df, col):
    f = bench.fit(df, column=col, max_bytes="256M")
    rows = df[df["size"] > 0].sort_values("size")
    large, small = rows.iloc[-1], rows.iloc[0]
    assert large["size"] == 1 << 30
    err_large = f.predict(int(large["size"])) / large[f"{col}_time_us"] - 1
    err_small = f.predict(int(small["size"])) / small[f"{col}_time_us"] - 1
    op = f.op
    assert abs(err_large) <= KNOWN.get((op, col, "large"), 0.15), (name, err_large, f)
    assert abs(err_small) <= KNOWN.get((op, col, "small"), 0.25), (name, err_small, f)
    assert 5 < f.alpha_us < 100 and 100 < f.beta_GBps < 1000, f
    assert f.residuals["size"].max() <= 256 << 20 and not f.warnings


def test_known_exceptions_are_still_exceptions():
    df = bench.to_frame(DTLAB)
    sr = df[df["op"] == "sendrecv"]
    f = bench.fit(sr, column="oop", max_bytes="256M")
    plateau = sr[(sr["size"] >= 16) & (sr["size"] <= 4096)]["oop_time_us"].median()
    assert abs(f.predict(8) / plateau - 1) < 0.10  # the model is right about the plateau
    assert sr["oop_time_us"].iloc[0] > 1.4 * plateau  # the 8 B row is the outlier
    assert bench.fit(sr, column="ip", max_bytes="256M").predict(1 << 30) / \
        sr["ip_time_us"].iloc[-1] - 1 > 0.15


def test_one_least_squares_fit_does_not_do_it():
    """Why fit() works per regime: a relative-error fit of both terms misses 1 GiB by far."""
    f = bench.fit(NT[0], max_bytes="256M")
    s, t = f.residuals["size"].to_numpy(float), f.residuals["time_us"].to_numpy(float)
    A = np.stack([np.ones_like(s), s], 1) / t[:, None]
    a, b = np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0]
    assert abs((a + b * (1 << 30)) / 3279.91 - 1) > 0.15
    assert abs(f.predict(1 << 30) / 3279.91 - 1) < 0.10


def test_model_crossover_and_ring_extrapolation():
    f = bench.fit(NT[0])
    assert f.predict(0) == pytest.approx(f.alpha_us)
    x = f.crossover_bytes
    assert x / (f.beta_GBps * 1e3) == pytest.approx(f.alpha_us)
    assert 1 << 20 < x < 64 << 20
    assert ring_steps("all_reduce", 8) == 14 and ring_steps("all_gather", 8) == 7 \
        and ring_steps("sendrecv", 8) == 1
    # 2 ranks: the model gives back the fit's own busbw
    t2 = f.predict(1 << 30)
    assert f.predict_busbw(2, 1 << 30) == pytest.approx(bench.busbw("all_reduce", 1 << 30, t2 * 1e-6, 2))
    # more ranks: same link rate, more latency steps -> lower busbw, approaching the link rate
    b4, b8 = f.predict_busbw(4, 1 << 30), f.predict_busbw(8, 1 << 30)
    assert b8 < b4 < f.beta_GBps and b8 > 0.95 * f.beta_GBps
    assert f.predict_busbw(8, 1 << 20) < 0.5 * f.predict_busbw(2, 1 << 20)


def test_synthetic_model_with_noise_is_recovered():
    rng = np.random.default_rng(0)
    sizes = [2 ** k for k in range(3, 31)]
    t = [(12.0 + s / 150e3) * (1 + 0.03 * rng.standard_normal()) for s in sizes]
    df = pd.DataFrame({"op": "all_reduce", "nranks": 2, "tool": "synthetic", "size": sizes,
                       "oop_time_us": t, "ip_time_us": np.nan})
    f = bench.fit(df)
    assert f.alpha_us == pytest.approx(12.0, rel=0.05) and f.beta_GBps == pytest.approx(150, rel=0.05)


def test_bad_input_is_one_clear_error():
    df = bench.to_frame(DTLAB)
    with pytest.raises(ValueError, match="several ops"):
        bench.fit(df)
    with pytest.raises(ValueError, match="at least 3"):
        bench.fit(df[df["op"] == "all_reduce"].head(2))
    with pytest.raises(ValueError, match="column"):
        bench.fit(NT[0], column="x")
    ar = df[df["op"] == "all_reduce"]
    with pytest.raises(ValueError, match="do not grow with size"):  # 8 B .. 64 KiB: all plateau
        bench.fit(ar[ar["size"] <= 65536])
    few = bench.fit(ar[ar["size"] <= 32 << 20])  # one size past 4 alpha
    assert few.warnings and "barely determined" in few.warnings[0]
    assert math.isfinite(few.alpha_us) and few.beta_GBps > 0
