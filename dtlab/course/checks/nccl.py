"""06's checks: recorded NCCL logs renamed per session for ``transport_and_channels``, recorded
rows for ``bus_bandwidth``, and for ``recommend`` the answer as a tuple and sweeps drawn from the
recorded one (a setting that changes what NCCL does made faster by a drawn margin).

The cases (which logs and sizes, the synthetic logs and sweeps, their expected answers) are the
test cell's."""

from __future__ import annotations

import io
import math

from .. import disguise
from ..recorded import data_root, recorded

TELLS = ["algorithm", "protocol", "channels", "transport"]  # what a setting changes of NCCL's run


def recorded_log(path: str) -> str:
    """The text of a recorded NCCL log under data/."""
    return recorded(path, show=False).text


def recorded_csv(path: str):
    """A recorded CSV under data/, as a DataFrame."""
    import pandas as pd

    return pd.read_csv(io.StringIO(recorded(path, show=False).text))


# -- transport_and_channels ------------------------------------------------------------------
def hidden_logs(mine, expected: dict, rng) -> None:
    """Each recorded log of ``expected`` ({path: answer}), renamed with ``rng``
    (:func:`dtlab.course.disguise.nccl_log`): the feedback names a case by its number only,
    neither its file nor its answer."""
    for case, (path, want) in enumerate(expected.items(), 1):
        got = mine(disguise.nccl_log(recorded_log(path), rng))
        assert got == want, f"hidden recorded log {case} of {len(expected)}: got {got!r}, which is not what it says"
        assert type(got["channels"]) is int, f"hidden recorded log {case}: channels should be an int, not {type(got['channels'])}"


# -- bus_bandwidth ---------------------------------------------------------------------------
def nccl_tests_rows(mine, ranks: int = 2):
    """Every row of the recorded nccl-tests all_reduce (h200x2-nccl-tests), out of place and in
    place: ``mine`` gives the bus bandwidth nccl-tests printed, within its 2 decimals. The rows."""
    import os

    from ...bench import to_frame

    nt = to_frame(os.path.join(data_root(), "h200x2-nccl-tests", "nt_all_reduce.txt"))
    for _, r in nt.iterrows():
        for col in ("oop", "ip"):  # nccl-tests prints 2 decimals: compare within that rounding
            got = mine("all_reduce", int(r["size"]), float(r[f"{col}_time_us"]), ranks)
            assert math.isclose(got, r[f"{col}_busbw"], rel_tol=2e-3, abs_tol=0.006), (
                f"all_reduce {int(r['size'])} B in {r[f'{col}_time_us']} us on 2 ranks: you say "
                f"{got:.3f} GB/s, nccl-tests printed {r[f'{col}_busbw']}")
    return nt


def bench_rows(mine, rows) -> None:
    """Every measured row of a dtlab bench CSV (``rows``): ``mine`` gives its bus bandwidth."""
    import pandas as pd

    for _, r in rows.iterrows():
        for col in ("oop", "ip"):
            if pd.notna(r[f"{col}_time_us"]):
                got = mine(r["op"], int(r["size"]), float(r[f"{col}_time_us"]), int(r["nranks"]))
                assert math.isclose(got, r[f"{col}_busbw"], rel_tol=1e-6), (
                    f"{r['op']} {int(r['size'])} B on {int(r['nranks'])} ranks: got {got}, recorded {r[f'{col}_busbw']}")


# -- recommend -------------------------------------------------------------------------------
def asker(mine):
    """``mine`` whose answer (setting, margin_pct), a list once it crossed, is a tuple again."""
    def ask(*args, **kwargs):
        got = mine(*args, **kwargs)  # your (setting, margin_pct), as a list
        return tuple(got) if type(got) is list else got

    return ask


def drawn_sweep(sweep, rng, margin_pct_range: tuple):
    """The recorded ``sweep`` at a size drawn from ``rng``, rows shuffled, one setting that changes
    what NCCL does made faster than the default's best by a margin drawn in ``margin_pct_range``
    (the rest no faster than it): (sweep, size, that setting, its margin in %), or None where no
    setting at that size changes what NCCL does."""
    size = int(rng.choice(sorted(set(sweep["size"]))))
    drawn = sweep[sweep["size"] == size].sample(frac=1.0, random_state=rng.randrange(1 << 31)).copy()
    ok = (drawn["status"] == "ok") & (drawn["wrong"] == 0)
    default = drawn[ok & (drawn["setting"] == "default")].iloc[0]
    same = ok & (drawn[TELLS] == default[TELLS]).all(axis=1)
    others = drawn[ok & ~same]
    if others.empty:
        return None
    pick = rng.choice(sorted(others["setting"]))
    margin_pct = rng.uniform(*margin_pct_range)
    fast = drawn.loc[same, "time_us"].min() / (1 + margin_pct / 100)
    slower = ok & ~same & (drawn["setting"] != pick)
    drawn.loc[slower, "time_us"] = drawn.loc[slower, "time_us"].clip(lower=fast * 1.02)
    drawn.loc[drawn["setting"] == pick, "time_us"] = fast
    return drawn, size, pick, margin_pct
