"""Rules for ranks that disagree or are stuck: TORCH_DISTRIBUTED_DEBUG=DETAIL's own report, the
first divergence of the collective sequences, where the stacks show the ranks, and timing.

Who is odd is always :func:`dtlab.divergence.vote`'s answer: a strict majority names the odd
ones out; with none (two ranks, a tie) every candidate is named, ``confident`` is False, and the
summary says what would tell them apart.
"""

from __future__ import annotations

import statistics
from collections import Counter

from ...divergence import NONE, vote
from ...vocab import dtype_name, op_name
from .facts import step_times
from .notes import TELLS, clip, describe, join, per_rank_counts, ranks_word, undecided

_CLASS = {"op": "op_mismatch", "count": "size_mismatch", "size": "size_mismatch",
          "dtype": "dtype_mismatch"}


def _blame(culprits, confident, what: str) -> str:
    """'rank 2 is the odd one out.' or the no-majority sentence."""
    if confident:
        return f"{ranks_word(culprits).capitalize()} is the odd one out{what}."
    return undecided(culprits, TELLS)


def detail_report(v):
    fps = v.f.of("fingerprint", every_run=True)
    missing = v.f.of("barrier_missing", every_run=True)
    if fps:
        seq = min(s.data["seq"] for s in fps)
        per_rank = {s.rank: (op_name(s.data["op"]), s.data["shape"], dtype_name(s.data["dtype"]))
                    for s in fps if s.data["seq"] == seq}
        groups: dict[tuple, list[int]] = {}
        for r, sig in sorted(per_rank.items()):
            groups.setdefault(sig, []).append(r)
        if len(groups) < 2:
            return None
        sigs = list(groups)
        kind = ("op" if len({g[0] for g in sigs}) > 1 else
                "size" if len({g[1] for g in sigs}) > 1 else "dtype")
        odd, confident = vote(groups)
        majority = max(groups.items(), key=lambda kv: len(kv[1]))[0]
        for s in fps[:4]:
            v.note(s.path, "TORCH_DISTRIBUTED_DEBUG=DETAIL",
                   f"rank {s.rank} at collective #{seq}: {s.data['op']} shape "
                   f"[{s.data['shape']}] {s.data['dtype']}")
        what = {"op": "called different collectives", "size": "passed tensors of different "
                "sizes", "dtype": "passed tensors of different dtypes"}[kind]
        return v.done(_CLASS[kind], odd, seq, majority[0],
                      f"At collective #{seq} the ranks {what} ({describe(groups)}), as "
                      f"TORCH_DISTRIBUTED_DEBUG=DETAIL's collective check reports. "
                      + _blame(odd, confident, "") + " Find the code path that differs on that "
                      "rank at this call.", confident)
    if missing:
        ranks = sorted({r for s in missing for r in s.data["ranks"]})
        v.note(missing[0].path, "TORCH_DISTRIBUTED_DEBUG=DETAIL", clip(missing[0].line, 200))
        by_trace = traces(v)
        if by_trace is not None and by_trace.failure_class == "missing_collective":
            return by_trace  # the traces say the same, with the position and the op
        return v.done("missing_collective", ranks, None, None,
                      f"{ranks_word(ranks).capitalize()} never reached the collective the others "
                      f"were in (DETAIL's monitoredBarrier names it): it skipped a collective or "
                      f"is stuck elsewhere.")
    return None


def traces(v):
    from .traces import first_divergence

    f = v.f
    d = first_divergence(f.traces) if len(f.traces) >= 2 else None
    if d is None:
        return None
    _vote_by_site(v, d)
    present = [c for c in d.items.values() if c is not None]
    op = Counter(c.op for c in present).most_common(1)[0][0]
    src = "Flight Recorder" if f.trace_source == "flight_recorder" else "NCCL COLL lines"
    for r, c in sorted(d.items.items()):
        v.note(f.trace_files.get(r, ""), f.trace_source,
               f"rank {r} collective #{d.position}: {c.describe() if c else 'none (fewer calls)'}")
    if d.reason == "fewer_calls":
        counts = {r: len(t) for r, t in f.traces.items()}
        short = d.groups.get(NONE, [])
        left = sorted(set(short) & f.returned)
        others = [r for r in sorted(d.items) if r not in short]
        why = (f"{ranks_word(left).capitalize()} returned while {ranks_word(others)} still "
               f"waited in #{d.position}: their errors only report that a peer went away. "
               if left else "")
        why += (f"{ranks_word(d.ranks).capitalize()} took a different path: a collective inside "
                f"a rank-dependent branch, skipped or added on that rank." if d.confident else
                f"Either {ranks_word(short)} skipped a collective or {ranks_word(others)} "
                f"issued one extra. " + undecided(d.ranks, TELLS))
        return v.done("missing_collective", d.ranks, d.position, op,
                      f"The ranks issued different numbers of collectives ({per_rank_counts(counts)}"
                      f", from {src}): at #{d.position} ({op}) {ranks_word(short)} had nothing "
                      f"to match. " + why, d.confident, root=left)
    what = {"op": "ops", "count": "element counts", "dtype": "dtypes"}[d.reason]
    return v.done(_CLASS[d.reason], d.ranks, d.position, op,
                  f"At collective #{d.position} the ranks disagree on {what} "
                  f"({describe(d.groups)}, from {src}). " + _blame(d.ranks, d.confident, "")
                  + " Collectives must match on every rank: find what makes that rank's tensor "
                    "(or call) different at this point.", d.confident)


def _vote_by_site(v, d) -> None:
    """Ranks without a trace join the group whose call came from the same source line
    (a rank that aborted inside the collective left its stack, not its Flight Recorder)."""
    if d.confident or d.reason == "fewer_calls":
        return
    site_groups: dict[str, tuple] = {}
    for sig, ranks in d.groups.items():
        for r in ranks:
            c = d.items.get(r)
            site = v.site_of(r) or (c.site if c else None)
            if c and site:
                site_groups[site] = sig
    for r in v.f.ranks:
        if r in d.items:
            continue
        site = v.site_of(r)
        if site in site_groups:
            d.groups[site_groups[site]].append(r)
            v.note("stacks", "site", f"rank {r} (no trace) was in the call at {site}")
    d.ranks, d.confident = vote(d.groups)


def stuck(v):
    f = v.f
    ops = {r: s.data.get("dist_op") for r, s in f.stacks.items() if s.data.get("dist_op")}
    sends = {s.rank for s in f.of("gloo_timeout") if s.data["op"] == "send"}
    nccl_send_first = [r for r, tail in f.p2p_tail.items()
                       if tail and tail[0].get("op", "").lower() == "send"]
    if (ops and set(ops.values()) <= {"send", "isend"} and len(ops) >= 2) or \
            (len(sends) >= 2 and not f.of("peer_lost")) or \
            (len(nccl_send_first) >= 2 and len(nccl_send_first) == len(f.p2p_tail)):
        ranks = sorted(set(ops) | sends | set(nccl_send_first))
        for r in ranks:
            v.note(f.stacks[r].path if r in f.stacks else "console", "stacks",
                   f"rank {r} blocked in send")
        return v.done("p2p_deadlock", ranks, None, "send",
                      f"Ranks {join(ranks)} are all blocked sending, each to a peer that "
                      f"is itself sending: nobody has posted the matching receive. Order "
                      f"the pairs (even ranks send first, odd ranks receive first) or use "
                      f"batch_isend_irecv.")
    if len(set(ops.values())) > 1:
        odd, _ = vote({(op,): [r for r, o in ops.items() if o == op] for op in set(ops.values())})
        for r, s in f.stacks.items():
            v.note(s.path, "stacks", f"rank {r} in {s.data.get('dist_op')} at {s.data.get('site')}")
        return v.done("op_mismatch", odd, None, None,
                      f"The ranks are stuck in different collectives "
                      f"({', '.join(f'rank {r}: {o}' for r, o in sorted(ops.items()))}), as "
                      f"their stacks show: a snapshot, not a record of every call.",
                      confident=False)
    sizes = f.of("gloo_size")
    if sizes:
        s = sizes[0]
        v.note(s.path, "console", f"rank {s.rank}: gloo received {s.data['got']} bytes where "
                                  f"it expected {s.data['expected']}")
        groups: dict[tuple, list[int]] = {}
        for r in f.ranks:
            if site := v.site_of(r):
                groups.setdefault((site,), []).append(r)
        odd, sure = vote(groups) if len(groups) > 1 else (f.ranks, False)
        return v.done("size_mismatch", odd if sure else f.ranks, None, None,
                      "gloo aborted a collective because a peer sent more bytes than this "
                      "rank's tensor holds: the ranks called it with different sizes (or "
                      "dtypes). Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see each rank's "
                      "shape and dtype.", confident=False)
    return _outside_collective(v, ops)


def _outside_collective(v, ops):
    """Stacks show some ranks inside a collective and the others in no collective (nor in a
    GPU sync, which on NCCL is where a rank waits for one): the others never reached it."""
    f = v.f
    inside = set(ops) | {r for r, s in f.stacks.items() if s.data.get("in_sync")}
    outside = {r for r, s in f.stacks.items() if r not in inside and s.data.get("site")
               and r not in f.returned}
    if not inside or not outside:
        return None
    op = op_name(next(iter(ops.values()))) if ops else None
    for r in sorted(outside):
        v.note(f.stacks[r].path, "stacks", f"rank {r} at {f.stacks[r].data['site']}, in no "
                                           f"collective")
    for r in sorted(inside):
        v.note(f.stacks[r].path, "stacks", f"rank {r} waiting in {ops.get(r) or 'a GPU sync'}"
                                           f" at {f.stacks[r].data.get('site')}")
    return v.done("missing_collective", sorted(outside), None, op,
                  f"{ranks_word(inside).capitalize()} waited in a collective"
                  + (f" ({op})" if op else "") + f" that {ranks_word(outside)} never reached: "
                  f"its stack shows it elsewhere (at "
                  f"{', '.join(f.stacks[r].data['site'] for r in sorted(outside))}), stuck or "
                  f"busy outside any collective. Stacks are one snapshot: look at what that "
                  f"line waits for (I/O, a lock, a loop) -- or whether the others issued a "
                  f"collective it never would.", confident=False)


def straggler(v):
    steps = step_times(v.f)
    late = []
    for step in sorted({s for r in steps.values() for s in r}):
        t = {r: ph["collective"] for r, vv in steps.items() if (ph := vv.get(step)) and "collective" in ph}
        if len(t) < 2:
            continue
        r_last = max(t, key=t.get)
        others = [x for r, x in t.items() if r != r_last]
        late.append((r_last, t[r_last] - statistics.median(others)))
    if len(late) < 2:
        return None
    counts = Counter(r for r, _ in late)
    rank, n = counts.most_common(1)[0]
    lag = statistics.median(d for r, d in late if r == rank)
    if n < 0.6 * len(late) or lag < 0.05:
        return None
    v.note("console", "[dtlab-step] timing",
           f"rank {rank} entered the collective last in {n} of {len(late)} steps, "
           f"{lag * 1e3:.0f} ms after the median of the others")
    return v.done("straggler", [rank], None, "all_reduce",
                  f"No hang, but rank {rank} reaches every collective about {lag:.2f} s "
                  f"after the others, so each step takes that much longer on every rank: "
                  f"the others' time is spent waiting inside the collective. Profile that "
                  f"rank (its data loading, its GPU, its host) rather than the network.")
