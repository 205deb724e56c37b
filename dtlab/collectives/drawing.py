"""What each collective moves: a before / after picture per rank, for any world size.

Rank r's data is a letter (rank 0 "A", rank 1 "B", ...), its chunks numbered: "B2" is rank 1's
chunk 2. A reduced chunk is "Σ2" (every rank's chunk 2, combined). A blank cell holds nothing
the collective defines. Colours follow the rank the data came from; grey is a reduction.

>>> import matplotlib; matplotlib.use("Agg")
>>> fig = draw("all_to_all", 3)
>>> type(fig).__name__, len(fig.axes), fig._repr_png_()[:4]
('Diagram', 2, b'\x89PNG')
>>> movement("reduce_scatter", 2)
([['A0', 'A1'], ['B0', 'B1']], [['Σ0', ''], ['', 'Σ1']])
"""

from __future__ import annotations

import functools

from .validation import check_op


def _letter(r: int) -> str:
    return chr(ord("A") + r) if r < 26 else f"R{r}"


def movement(op: str, n: int) -> tuple[list[list[str]], list[list[str]]]:
    """(before, after): for each rank, the label in each of its n slots ('' = nothing defined).
    Roots (broadcast, reduce, gather, scatter) are rank 0; send/recv goes to the right."""
    op = check_op(op)
    L, idx = [_letter(r) for r in range(n)], range(n)
    blank = [[""] * n for _ in idx]

    def only(rows_slot):  # each rank holds one label in one slot
        out = [[""] * n for _ in idx]
        for r, (slot, label) in enumerate(rows_slot):
            if label:
                out[r][slot] = label
        return out
    chunks = [[f"{L[r]}{j}" for j in idx] for r in idx]
    own = only([(r, L[r]) for r in idx])
    if op == "all_reduce":
        return chunks, [[f"Σ{j}" for j in idx] for _ in idx]
    if op == "reduce_scatter":
        return chunks, only([(r, f"Σ{r}") for r in idx])
    if op == "all_gather":
        return own, [L[:] for _ in idx]
    if op == "all_to_all":
        return chunks, [[f"{L[j]}{r}" for j in idx] for r in idx]
    if op == "broadcast":
        return only([(0, "A" if r == 0 else "") for r in idx]), [["A"] + [""] * (n - 1)
                                                               for _ in idx]
    if op == "reduce":
        return [[L[r]] + [""] * (n - 1) for r in idx], [["Σ" if r == 0 else ""] + [""] * (n - 1)
                                                      for r in idx]
    if op == "gather":
        return own, [L[:]] + [row[:] for row in own[1:]]
    if op == "scatter":
        return [chunks[0]] + blank[1:], only([(r, f"A{r}") for r in idx])
    if op == "sendrecv":  # send right, receive from the left
        return own, only([(r, L[(r - 1) % n]) for r in idx])
    # batch_isend_irecv: both neighbours at once, left's in slot 0, right's in slot 1
    return own, [[L[(r - 1) % n], L[(r + 1) % n]] + [""] * (n - 2) for r in idx]


@functools.cache
def _diagram_class():  # made on first use: importing matplotlib costs a rank that never draws
    from matplotlib.figure import Figure

    class Diagram(Figure):
        """A Figure that shows itself as a picture when a notebook cell returns it (a Figure
        made without pyplot has no display of its own: the cell would print its repr)."""

        def _repr_png_(self) -> bytes:
            import io

            buf = io.BytesIO()
            self.savefig(buf, format="png", bbox_inches="tight")
            return buf.getvalue()

    return Diagram


def draw(op: str, world_size: int):
    """A matplotlib Figure (no pyplot, so safe under Agg and in a server) that a notebook shows
    as a picture: ``op`` before and after on ``world_size`` ranks, one row per rank."""
    Figure = _diagram_class()  # noqa: N806 (a class)

    if world_size < 1 or world_size > 16:
        raise ValueError(f"world_size={world_size}: draw 1 to 16 ranks.")
    before, after = movement(op, world_size)
    n = world_size
    fig = Figure(figsize=(2.2 + 1.1 * n, 0.9 + 0.45 * n))
    palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f", "#bab0ac"]
    for ax, grid, title in zip(fig.subplots(1, 2), (before, after), ("before", "after")):
        for r, row in enumerate(grid):
            for j, label in enumerate(row):
                colour = "white" if not label else "#999999" if label.startswith("Σ") else \
                    palette[(ord(label[0]) - ord("A")) % len(palette)]
                ax.add_patch(_box(j, n - 1 - r, colour))
                ax.text(j + 0.5, n - 0.5 - r, label, ha="center", va="center", fontsize=9,
                        color="white" if label else "black")
        ax.set_xlim(0, n)
        ax.set_ylim(0, n)
        ax.set_yticks([n - 0.5 - r for r in range(n)], [f"rank {r}" for r in range(n)])
        ax.set_xticks([])
        ax.set_title(f"{check_op(op)}: {title}")
        ax.set_aspect("equal")
    fig.tight_layout()
    return fig


def _box(x, y, colour):
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.04, y + 0.04), 0.92, 0.92, facecolor=colour, edgecolor="#444444")
