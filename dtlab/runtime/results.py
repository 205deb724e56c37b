"""What a launch returns: one :class:`RankResult` per rank, gathered in :class:`Results`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class RankResult:
    """The outcome of one rank.

    ``value`` is what ``fn`` returned on that rank (CUDA tensors come back on the CPU);
    ``stdout`` / ``stderr`` are everything the rank's process wrote to file descriptors 1 and 2
    (C-level output such as NCCL_DEBUG lines included); ``exit_code`` is the process exit status
    (negative: killed by that signal; ``None``: still running when it was stopped);
    ``duration_s`` is the time spent inside ``fn`` on that rank, or ``None`` if it never returned.
    """

    rank: int
    value: Any = None
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration_s: float | None = None
    pid: int | None = None
    device: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.duration_s is not None


@dataclass
class Results:
    """Per-rank results of :func:`dtlab.run` or :meth:`dtlab.Pool.run`, in rank order.

    >>> res = dtlab.run(lambda: dist.get_rank() * 10)     # doctest: +SKIP
    >>> res.values                                         # doctest: +SKIP
    [0, 10]
    >>> res[1].duration_s                                  # doctest: +SKIP
    0.0001
    """

    ranks: list[RankResult]
    backend: str = ""
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def values(self) -> list[Any]:
        return [r.value for r in self.ranks]

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def __getitem__(self, rank: int) -> RankResult:
        """The result of rank ``rank`` (by rank number: a pool cell may run on a subset)."""
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"no result for rank {rank}; this result holds ranks "
                       f"{[r.rank for r in self.ranks]}")

    def __iter__(self) -> Iterator[RankResult]:
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)

    def __repr__(self) -> str:
        head = f"Results({self.world_size} ranks, backend={self.backend!r}, wall {self.wall_s:.2f} s)"
        rows = []
        for r in self.ranks:
            dur = "-" if r.duration_s is None else f"{r.duration_s:.3f} s"
            val = repr(r.value)
            if len(val) > 60:
                val = val[:57] + "..."
            rows.append(f"  rank {r.rank}: exit {r.exit_code}, fn {dur}, value {val}")
        return "\n".join([head, *rows])

    def _repr_html_(self) -> str:  # a table in notebooks
        import html

        cells = "".join(
            "<tr>"
            f"<td>{r.rank}</td><td>{r.device or ''}</td><td>{r.exit_code}</td>"
            f"<td>{'' if r.duration_s is None else f'{r.duration_s:.4f}'}</td>"
            f"<td><code>{html.escape(repr(r.value)[:200])}</code></td>"
            "</tr>"
            for r in self.ranks
        )
        return (
            f"<b>Results</b>: {self.world_size} ranks, backend <code>{self.backend}</code>, "
            f"wall {self.wall_s:.2f} s"
            "<table><tr><th>rank</th><th>device</th><th>exit</th><th>fn (s)</th><th>value</th></tr>"
            f"{cells}</table>"
        )
