"""Step 5: from facts to a verdict, strongest evidence first.

Each rule either names the failure or passes; the order is the order an engineer trusts
evidence in: an out-of-memory message > a rank that died > a collective checker's own report
(TORCH_DISTRIBUTED_DEBUG=DETAIL) > the ranks' collective sequences (Flight Recorder, NCCL COLL
lines) > where the ranks are stuck (stacks, timeouts) > timing (stragglers).

Culprits: the odd one out when a strict minority disagrees with everyone else; with two ranks
that disagree, both -- unless the evidence itself singles one out (it died, it ran out of
memory, it issued fewer collectives).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from .facts import Facts, step_times
from .notes import add_context, canon_op, describe, exit_text, join, per_rank_counts
from .traces import first_divergence, odd_one_out, op_name

CLASSES = ("size_mismatch", "dtype_mismatch", "op_mismatch", "missing_collective", "rank_died",
           "oom", "p2p_deadlock", "straggler", "timeout_unknown", "no_failure")


@dataclass
class Diagnosis:
    failure_class: str
    culprit_ranks: list[int]
    collective_seq: int | None
    op: str | None
    summary: str
    evidence: list[dict] = field(default_factory=list)
    # False when the verdict rests on thin evidence (a byte count, stacks alone): a second
    # look with more evidence (TORCH_DISTRIBUTED_DEBUG=DETAIL, Flight Recorder) is worth it
    confident: bool = True

    def to_dict(self) -> dict:
        return {"failure_class": self.failure_class, "culprit_ranks": self.culprit_ranks,
                "collective_seq": self.collective_seq, "op": self.op, "evidence": self.evidence,
                "summary": self.summary, "confident": self.confident}


class _Verdict:
    def __init__(self, f: Facts):
        self.f = f
        self.evidence: list[dict] = []

    def note(self, file: str, kind: str, finding: str) -> None:
        item = {"file": file, "kind": kind, "finding": finding}
        if item not in self.evidence:
            self.evidence.append(item)

    def done(self, cls, culprits, seq, op, summary, confident: bool = True) -> Diagnosis:
        return Diagnosis(cls, sorted(set(culprits)), seq, op, summary, self.evidence, confident)

    # -- helpers ----------------------------------------------------------------------------------
    def stuck_seq(self, exclude=()) -> tuple[int | None, str | None]:
        """The collective the other ranks were last in (their last recorded call); without
        their traces, the one after the last that the excluded (failed) ranks issued."""
        last = [t[-1] for r, t in self.f.traces.items() if t and r not in exclude]
        if not last:
            mine = [t for r, t in self.f.traces.items() if t and r in exclude]
            waiting = [s.data.get("dist_op") for r, s in self.f.stacks.items() if r not in exclude]
            if mine and any(waiting):
                ops = [w for w in waiting if w]
                return max(t[-1].seq for t in mine) + 1, canon_op(ops[0])
            return None, None
        seq, _ = Counter(c.seq for c in last).most_common(1)[0]
        op = next(c.op for c in last if c.seq == seq)
        return seq, op

    def site_of(self, rank: int) -> str | None:
        for kind in ("fatal", "exception"):
            for s in self.f.of(kind, rank):
                if s.data.get("site"):
                    return s.data["site"]
        st = self.f.stacks.get(rank)
        return st.data.get("site") if st else None

    # -- the rules --------------------------------------------------------------------------------
    def decide(self) -> Diagnosis:
        for rule in (self.oom, self.died, self.detail_report, self.traces, self.finished_vs_stuck,
                     self.stuck, self.straggler):
            d = rule()
            if d is not None:
                self.context()
                return d
        d = self.fallback()
        self.context()
        return d

    def context(self) -> None:
        add_context(self.f, self.note, self.evidence)

    def finished_vs_stuck(self):
        """Some ranks returned while others were still inside a collective: the others issued
        (at least) one collective more -- the shape of a skipped or an extra collective."""
        f = self.f
        stuck = {r for r in f.ranks if r not in f.returned and (
            any(s.data.get("dist_op") for s in f.of("exception", r))
            or (r in f.stacks and f.stacks[r].data.get("dist_op")))}
        finished = set(f.returned)
        if not finished or not stuck:
            return None
        groups = {("finished",): sorted(finished), ("in a collective",): sorted(stuck)}
        culprits = odd_one_out(groups) or sorted(finished)  # two ranks: the one that issued fewer
        done_len = max((len(f.traces[r]) for r in finished if r in f.traces), default=None)
        seq = done_len + 1 if done_len is not None else None
        for r in sorted(stuck):
            self.note("console", "traceback/stacks", f"rank {r} was still in a collective")
        self.note("run.json", "exit", f"rank {join(finished)} returned normally")
        return self.done("missing_collective", culprits, seq, "all_reduce" if seq else None,
                         f"Rank {join(finished)} finished while rank {join(stuck)} was still "
                         f"waiting in a collective" + (f" (#{seq})" if seq else "")
                         + f": the ranks issued different numbers of collectives. Rank "
                           f"{join(culprits)} took a different path (a collective skipped or "
                           f"added inside a rank-dependent branch).")

    def oom(self):
        ooms = self.f.of("oom")
        if not ooms:
            return None
        ranks = sorted({s.rank for s in ooms if s.rank is not None})
        for s in ooms:
            self.note(s.path, "console", f"rank {s.rank}: out of memory: {s.line.strip()[:160]}")
        seq, op = self.stuck_seq(exclude=ranks)
        return self.done("oom", ranks, seq, op,
                         f"Rank {join(ranks)} ran out of memory"
                         + (f" before collective #{seq} ({op})" if seq else "")
                         + "; the other ranks then waited for it in that collective until they "
                           "failed or were stopped. Fix the memory use on that rank (batch size, "
                           "activation checkpointing, a leak); the hang is only a consequence.")

    def died(self):
        f = self.f
        dead = {}
        for r, code in f.exit_codes.items():
            if code in (None, 0) or r in f.stopped:
                if code == 0 and r not in f.returned and r not in f.stopped:
                    dead[r] = "exited with code 0 before its function returned"
                continue
            if f.of("exception", r) or f.of("watchdog", r):
                continue  # a Python failure, or NCCL's watchdog tearing the rank down
            fatal = f.of("fatal", r)
            if fatal and (fatal[0].data.get("cpp_message") or f.of("gloo_size", r)
                          or f.of("nccl_error", r)):
                continue  # an abort inside the collective library: a symptom, not a death
            dead[r] = exit_text(code)
        for s in f.of("reported_exit"):
            code = s.data["exit_code"]
            if s.rank not in dead and code not in (0, 1) and s.rank not in f.exit_codes:
                dead[s.rank] = exit_text(code)
        if not dead:
            return None
        for r, why in sorted(dead.items()):
            self.note("run.json" if r in f.exit_codes else "console", "exit", f"rank {r} {why}")
        ranks = sorted(dead)
        seq, op = self.stuck_seq(exclude=ranks)
        if seq:
            self.note(f.trace_files.get(next(iter(set(f.traces) - set(ranks)), -1), "traces"),
                      f.trace_source, f"the other ranks' last collective: #{seq} ({op})")
        return self.done("rank_died", ranks, seq, op,
                         f"Rank {join(ranks)} died ({'; '.join(dead[r] for r in ranks)}) while the "
                         f"others" + (f" were in collective #{seq} ({op})" if seq else " ran on")
                         + ", which can never complete without it. Look at that rank's own output and "
                           "the machine's logs (dmesg: the OOM killer, a node failure), not at the "
                           "ranks that reported the hang.")

    def detail_report(self):
        fps = self.f.of("fingerprint", every_run=True)
        missing = self.f.of("barrier_missing", every_run=True)
        if fps:
            seq = min(s.data["seq"] for s in fps)
            per_rank = {}
            for s in fps:
                if s.data["seq"] == seq:
                    per_rank[s.rank] = (op_name(s.data["op"]), s.data["shape"], s.data["dtype"].lower())
            groups: dict[tuple, list[int]] = {}
            for r, sig in per_rank.items():
                groups.setdefault(sig, []).append(r)
            sigs = list(groups)
            if len(sigs) < 2:
                return None
            kinds = ["op" if len({g[0] for g in sigs}) > 1 else
                     "size" if len({g[1] for g in sigs}) > 1 else "dtype"]
            cls = {"op": "op_mismatch", "size": "size_mismatch", "dtype": "dtype_mismatch"}[kinds[0]]
            odd = odd_one_out(groups) or sorted(per_rank)
            majority = max(groups.items(), key=lambda kv: len(kv[1]))[0]
            for s in fps[:4]:
                self.note(s.path, "TORCH_DISTRIBUTED_DEBUG=DETAIL",
                          f"rank {s.rank} at collective #{seq}: {s.data['op']} shape "
                          f"[{s.data['shape']}] {s.data['dtype']}")
            what = {"op": "called a different collective", "size": "passed a tensor of a "
                    "different size", "dtype": "passed a tensor of a different dtype"}[kinds[0]]
            return self.done(cls, odd, seq, majority[0],
                             f"At collective #{seq} rank {join(odd)} {what} than the "
                             f"others ({describe(groups)}), as TORCH_DISTRIBUTED_DEBUG=DETAIL's "
                             f"collective check reports. Find the code path that differs on that "
                             f"rank at this call.")
        if missing:
            ranks = sorted({r for s in missing for r in s.data["ranks"]})
            self.note(missing[0].path, "TORCH_DISTRIBUTED_DEBUG=DETAIL", missing[0].line.strip()[:200])
            by_trace = self.traces()
            if by_trace is not None and by_trace.failure_class == "missing_collective":
                return by_trace  # the traces say the same, with the position and the op
            return self.done("missing_collective", ranks, None, None,
                             f"Rank {join(ranks)} never reached the collective the others were "
                             f"in (DETAIL's monitoredBarrier names it): it skipped a collective or "
                             f"is stuck elsewhere.")
        return None

    def traces(self):
        f = self.f
        d = first_divergence(f.traces) if len(f.traces) >= 2 else None
        if d is None:
            return None
        self._vote_by_site(d)
        culprits = d.odd or (d.fewer if d.reason == "fewer_calls" else sorted(f.traces))
        present = [c for c in d.calls.values() if c is not None]
        op = Counter(c.op for c in present).most_common(1)[0][0]
        src = "Flight Recorder" if f.trace_source == "flight_recorder" else "NCCL COLL lines"
        for r, c in sorted(d.calls.items()):
            self.note(f.trace_files.get(r, ""), f.trace_source,
                      f"rank {r} collective #{d.seq}: {c.describe() if c else 'none (fewer calls)'}")
        if d.reason == "fewer_calls":
            counts = {r: len(t) for r, t in f.traces.items()}
            return self.done("missing_collective", culprits, d.seq, op,
                             f"The ranks issued different numbers of collectives ({per_rank_counts(counts)}, "
                             f"from {src}): at #{d.seq} ({op}) rank {join(d.fewer)} had nothing to "
                             f"match. Rank {join(culprits)} took a different path: a collective "
                             f"inside a rank-dependent branch, skipped or added on that rank.")
        cls = {"op": "op_mismatch", "count": "size_mismatch", "dtype": "dtype_mismatch"}[d.reason]
        what = {"op": "ops", "count": "element counts", "dtype": "dtypes"}[d.reason]
        return self.done(cls, culprits, d.seq, op,
                         f"At collective #{d.seq} the ranks disagree on {what} "
                         f"({describe(d.groups)}, from {src}); rank {join(culprits)} is the odd "
                         f"one out. Collectives must match on every rank: find what makes that "
                         f"rank's tensor (or call) different at this point.")

    def _vote_by_site(self, d) -> None:
        """Ranks without a trace join the group whose call came from the same source line
        (a rank that aborted inside the collective left its stack, not its Flight Recorder)."""
        if d.odd or d.reason == "fewer_calls":
            return
        site_groups: dict[str, tuple] = {}
        for sig, ranks in d.groups.items():
            for r in ranks:
                c = d.calls.get(r)
                site = self.site_of(r) or (c.site if c else None)
                if c and site:
                    site_groups[site] = sig
        for r in self.f.ranks:
            if r in d.calls:
                continue
            site = self.site_of(r)
            if site in site_groups:
                d.groups[site_groups[site]].append(r)
                self.note("stacks", "site", f"rank {r} (no trace) was in the call at {site}")
        d.odd = odd_one_out(d.groups)

    def stuck(self):
        f = self.f
        ops = {r: s.data.get("dist_op") for r, s in f.stacks.items() if s.data.get("dist_op")}
        sends = {s.rank for s in f.of("gloo_timeout") if s.data["op"] == "send"}
        nccl_send_first = [r for r, tail in f.p2p_tail.items()
                           if tail and tail[0].get("op", "").lower() == "send"]
        if (ops and set(ops.values()) <= {"send", "isend"} and len(ops) >= 2) or \
                (len(sends) >= 2 and not f.of("peer_lost")) or \
                (len(nccl_send_first) >= 2 and len(nccl_send_first) == len(f.p2p_tail)):
            ranks = sorted(set(ops) | sends | set(nccl_send_first))
            for r in ranks:
                self.note(f.stacks[r].path if r in f.stacks else "console", "stacks",
                          f"rank {r} blocked in send")
            return self.done("p2p_deadlock", ranks, None, "send",
                             f"Ranks {join(ranks)} are all blocked sending, each to a peer that "
                             f"is itself sending: nobody has posted the matching receive. Order "
                             f"the pairs (even ranks send first, odd ranks receive first) or use "
                             f"batch_isend_irecv.")
        if len(set(ops.values())) > 1:
            groups: dict[tuple, list[int]] = {}
            for r, op in ops.items():
                groups.setdefault((op,), []).append(r)
            odd = odd_one_out(groups) or sorted(ops)
            for r, s in f.stacks.items():
                self.note(s.path, "stacks", f"rank {r} in {s.data.get('dist_op')} at {s.data.get('site')}")
            return self.done("op_mismatch", odd, None, None,
                             f"The ranks are stuck in different collectives "
                             f"({', '.join(f'rank {r}: {o}' for r, o in sorted(ops.items()))}).",
                             confident=False)
        sizes = f.of("gloo_size")
        if sizes:
            s = sizes[0]
            self.note(s.path, "console", f"rank {s.rank}: gloo received {s.data['got']} bytes where "
                                         f"it expected {s.data['expected']}")
            sites = {r: self.site_of(r) for r in f.ranks}
            groups: dict[tuple, list[int]] = {}
            for r, site in sites.items():
                if site:
                    groups.setdefault((site,), []).append(r)
            odd = odd_one_out(groups) or f.ranks
            return self.done("size_mismatch", odd, None, None,
                             "gloo aborted a collective because a peer sent more bytes than this "
                             "rank's tensor holds: the ranks called it with different sizes (or "
                             "dtypes). Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see each rank's "
                             "shape and dtype.", confident=False)
        return None

    def straggler(self):
        steps = step_times(self.f)
        late = []
        for step in sorted({s for r in steps.values() for s in r}):
            t = {r: ph["collective"] for r, v in steps.items() if (ph := v.get(step)) and "collective" in ph}
            if len(t) < 2:
                continue
            r_last = max(t, key=t.get)
            others = [v for r, v in t.items() if r != r_last]
            late.append((r_last, t[r_last] - statistics.median(others)))
        if len(late) < 2:
            return None
        counts = Counter(r for r, _ in late)
        rank, n = counts.most_common(1)[0]
        lag = statistics.median(d for r, d in late if r == rank)
        if n < 0.6 * len(late) or lag < 0.05:
            return None
        self.note("console", "[dtlab-step] timing",
                  f"rank {rank} entered the collective last in {n} of {len(late)} steps, "
                  f"{lag * 1e3:.0f} ms after the median of the others")
        return self.done("straggler", [rank], None, "all_reduce",
                         f"No hang, but rank {rank} reaches every collective about {lag:.2f} s "
                         f"after the others, so each step takes that much longer on every rank: "
                         f"the others' time is spent waiting inside the collective. Profile that "
                         f"rank (its data loading, its GPU, its host) rather than the network.")

    def fallback(self) -> Diagnosis:
        bad = self.f.outcome not in (None, "ok") or self.f.of("exception") or self.f.of("watchdog")
        for s in self.f.of("watchdog"):
            self.note(s.path, "watchdog", s.line.strip()[:200])
        if bad:
            return self.done("timeout_unknown", [], None, None,
                             "The ranks failed or timed out, but the evidence does not show why: "
                             "collect py-spy stacks during the hang, NCCL_DEBUG=INFO "
                             "(NCCL_DEBUG_SUBSYS=INIT,COLL) and Flight Recorder dumps, or rerun with "
                             "TORCH_DISTRIBUTED_DEBUG=DETAIL.", confident=False)
        return self.done("no_failure", [], None, None,
                         "Every rank finished and no rank lagged the others: nothing to fix.")


def decide(facts: Facts) -> Diagnosis:
    return _Verdict(facts).decide()
