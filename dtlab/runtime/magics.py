"""``%dtlab`` / ``%%dtlab``: a thin skin over :class:`dtlab.Pool` for notebook cells.

    %load_ext dtlab
    %dtlab start -n 2 [--backend gloo]     start a pool (replacing any running one)
    %%dtlab [--ranks 0,1] [--timeout 30]   run this cell on those ranks, output in per-rank panes
    %dtlab status | stop | restart

Inside a ``%%dtlab`` cell the names ``rank``, ``world_size``, ``device``, ``torch`` and ``dist``
are defined, and variables persist from cell to cell on each rank. Everything here is also
possible from Python: ``dtlab.runtime.magics.current_pool()`` is the pool these magics drive.
"""

from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from .pool import Pool

_pool: Pool | None = None


def current_pool() -> Pool | None:
    """The pool started by ``%dtlab start`` (None before)."""
    return _pool


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, add_help=False, exit_on_error=False)
    return p


def _parse(p: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    try:
        return p.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit, ValueError) as e:
        raise UsageError(f"{p.prog}: {e}. Usage: {p.format_usage().strip()}") from None


def _ranks(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--ranks {text!r}: give rank numbers separated by commas, "
                         f"e.g. --ranks 0,1") from None


@magics_class
class DtlabMagics(Magics):
    @line_cell_magic
    def dtlab(self, line: str, cell: str | None = None):
        """%dtlab start|status|stop|restart, or %%dtlab [--ranks R,..] [--timeout S] on a cell."""
        if cell is not None:
            return self._cell(line, cell)
        words = line.split(maxsplit=1)
        cmd, rest = (words[0], words[1] if len(words) > 1 else "") if words else ("", "")
        if cmd == "start":
            return self._start(rest)
        if cmd == "status":
            return self._status()
        if cmd == "stop":
            return self._stop()
        if cmd == "restart":
            pool = self._need_pool()
            pool.restart()
            print(f"dtlab: restarted {pool!r}")
            return None
        raise UsageError("usage: %dtlab start -n N [--backend auto|nccl|gloo] | status | stop | "
                         "restart; or %%dtlab [--ranks 0,1] [--timeout S] as a cell magic")

    def _need_pool(self) -> Pool:
        if _pool is None:
            raise UsageError("no dtlab pool is running: start one with `%dtlab start -n 2`")
        return _pool

    def _start(self, rest: str):
        global _pool
        p = _parser("%dtlab start")
        p.add_argument("-n", "--nprocs", type=int, default=None)
        p.add_argument("--backend", default="auto")
        p.add_argument("--timeout", type=float, default=300.0, help="start-up timeout, seconds")
        a = _parse(p, rest)
        if _pool is not None:
            print(f"dtlab: stopping the running pool {_pool!r}")
            _pool.close()
            _pool = None
        _pool = Pool(nprocs=a.nprocs, backend=a.backend, start_timeout=a.timeout)
        devices = ", ".join(f"rank {r}: {d}" for r, d in enumerate(_pool.plan.devices))
        print(f"dtlab: {_pool.nprocs} ranks up, backend {_pool.backend} ({devices})")
        return None

    def _status(self):
        pool = self._need_pool()
        print(repr(pool))
        for s in pool.status():
            last = "-" if s["last_s"] is None else f"{s['last_s'] * 1e3:.1f} ms"
            print(f"  rank {s['rank']}: pid {s['pid']}, {s['device']}, "
                  f"{'alive' if s['alive'] else 'DEAD'}, {'busy' if s['busy'] else 'idle'}, "
                  f"{s['cells']} cells, last {last}")
        return None

    def _stop(self):
        global _pool
        if _pool is None:
            print("dtlab: no pool running")
            return None
        _pool.close()
        print("dtlab: pool stopped; no rank is left")
        _pool = None
        return None

    def _cell(self, line: str, cell: str):
        p = _parser("%%dtlab")
        p.add_argument("--ranks", default=None)
        p.add_argument("--timeout", type=float, default=None)
        a = _parse(p, line)
        res = self._need_pool().exec(cell, ranks=_ranks(a.ranks), timeout=a.timeout)
        return res if any(v is not None for v in res.values) else None


def load_ipython_extension(ip) -> None:
    ip.register_magics(DtlabMagics)


def unload_ipython_extension(ip) -> None:
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None
