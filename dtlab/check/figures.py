"""The pictures of ``dtlab check --html``: each a PNG, made from what a check measured (or from a
recorded file, the same columns), so that the report needs nothing beside itself."""

from __future__ import annotations

import base64
import io


def _png(fig) -> str:
    """The figure as base64 PNG text (for an ``<img src="data:...">``), then closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def p2p_png(rows: list[dict]) -> str:
    """The one-way copy rate of every ordered GPU pair as a heat map (:func:`dtlab.bench.plot_p2p`)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from ..bench import plot_p2p

    ax = plot_p2p(rows, "uni_GBps", title="P2P copies, one way (GB/s)")
    return _png(ax.figure)


def bandwidth_png(sizes: list[int], busbw: list[float], ceiling: float | None,
                  pass_fraction: float, healthy_fraction: float) -> str:
    """all_reduce busbw against the message size, with the links' ceiling and the fractions of it
    the verdict uses (PASS from ``pass_fraction``; a healthy recorded machine at
    ``healthy_fraction``)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(sizes, busbw, "o-", label="all_reduce busbw, measured")
    if ceiling:
        ax.axhline(ceiling, color="k", lw=1, label=f"the links' ceiling, {ceiling:.0f} GB/s")
        ax.axhline(healthy_fraction * ceiling, color="g", ls="--", lw=1,
                   label=f"a healthy recorded machine ({healthy_fraction:.2f})")
        ax.axhline(pass_fraction * ceiling, color="orange", ls=":", lw=1,
                   label=f"PASS, at 1 GiB, from {pass_fraction:.2f}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.legend(fontsize="small", loc="lower right")
    ax.grid(alpha=0.3)
    return _png(fig)
