"""The answer ``parse`` gives: one object over all the processes' logs, and its JSON form.

``ranks``, ``collectives`` and ``divergence`` describe one communicator: the world one unless
``parse(..., comm=...)`` named another. Every communicator found is in ``communicators``.

>>> from dtlab.nccl_log import parse
>>> d = parse("h:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\\n").to_dict()
>>> d["env"], d["ranks"], d["divergence"]
({'NCCL_P2P_DISABLE': '1'}, [], None)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .divergence import divergence, opcount_check
from .model import Call, Communicator


@dataclass
class NcclLog:
    sources: list[str]
    processes: list[dict]  # {host, pid, rank (in the world communicator), sources}
    communicators: list[Communicator]
    world: Communicator | None
    selected: Communicator | None
    versions: dict[str, tuple[str, str | None]]  # "host:pid" (or "") -> (version, cuda)
    env_by_process: dict[str, dict[str, str]]
    networks: dict[str, list[str]]
    warnings: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    skipped_sources: list[str] = field(default_factory=list)
    overlong_lines: dict[str, int] = field(default_factory=dict)  # source -> lines skipped as
    # longer than sources.MAX_LINE (no NCCL line is)
    nodes: dict = field(default_factory=dict)  # nodes.nodes(): hosts, nNodes, cross-node links

    # ---- single facts, merged over processes ----
    @property
    def nccl_version(self) -> str | None:
        counts = Counter(v for v, _ in self.versions.values())
        return counts.most_common(1)[0][0] if counts else None

    @property
    def cuda_version(self) -> str | None:
        cudas = [c for v, c in self.versions.values() if v == self.nccl_version and c]
        return cudas[0] if cudas else None

    @property
    def version_mismatch(self) -> bool:
        return len({v for v, _ in self.versions.values()}) > 1

    @property
    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for env in self.env_by_process.values():
            for k, v in env.items():
                out.setdefault(k, v)
        return dict(sorted(out.items()))

    @property
    def env_mismatch(self) -> dict[str, dict[str, str]]:
        """Variables set differently in some processes, or only in some (value None where a
        process logged no such line): one rank with NCCL_P2P_DISABLE is a classic surprise."""
        names = {k for env in self.env_by_process.values() for k in env}
        out = {}
        for k in sorted(names):
            vals = {p: env.get(k) for p, env in self.env_by_process.items()}
            if len(set(vals.values())) > 1:
                out[k] = vals
        return out

    @property
    def network(self) -> str | None:
        nets = sorted({n for ns in self.networks.values() for n in ns})
        return "/".join(nets) if nets else None

    @property
    def world_size(self) -> int | None:
        return self.world.nranks if self.world else None

    # ---- the selected communicator ----
    def calls(self, include_p2p: bool = True) -> dict[int, list[Call]]:
        return self.selected.calls(include_p2p) if self.selected else {}

    @property
    def divergence(self) -> dict | None:
        return divergence(self.calls(include_p2p=False))

    @property
    def alignment(self) -> dict:
        return {"by": "position", "opcount": opcount_check(self.calls(include_p2p=False))}

    @property
    def tuning(self) -> list[dict]:
        return self.selected.tuning if self.selected else []

    def render(self) -> str:
        """One screen for a person (:func:`dtlab.nccl_log.report.summary`)."""
        from .report import summary

        return summary(self)

    def to_dict(self) -> dict:
        sel = self.selected
        return {
            "nccl_version": self.nccl_version,
            "cuda_version": self.cuda_version,
            "version_mismatch": self.version_mismatch,
            "versions": {p: v for p, (v, _) in sorted(self.versions.items())},
            "sources": self.sources,
            "skipped_sources": self.skipped_sources,
            "overlong_lines": self.overlong_lines,
            "processes": self.processes,
            "world_size": self.world_size,
            "world": self.world.key if self.world else None,
            "communicator": sel.to_dict() if sel else None,
            "ranks": [v.to_dict() for _, v in sorted(sel.members.items())] if sel else [],
            "env": self.env,
            "env_mismatch": self.env_mismatch,
            "network": self.network,
            "tuning": self.tuning,
            "collectives": {r: [c.to_dict() for c in cs] for r, cs in self.calls().items()},
            "n_collectives": {r: len(cs) for r, cs in self.calls().items()},
            "divergence": self.divergence,
            "alignment": self.alignment,
            "communicators": [c.to_dict() for c in self.communicators],
            "nodes": self.nodes,
            "warnings": self.warnings,
            "errors": self.errors,
        }
