"""Rules for a rank that failed or left by itself: out of memory, a Python exception, a death,
a rank that returned or exited while its peers still waited in a collective.

Each rule takes the :class:`~.verdict.Verdict` and returns a Diagnosis or None (pass).
The peers' own errors ("Connection closed by peer", a gloo timeout) are consequences and never
make a rank a culprit; nor does a stop by dtlab, the launcher or an outside timeout
(``Facts.stopped``).
"""

from __future__ import annotations

from ...divergence import vote
from ...vocab import exit_summary
from . import signals as S
from .facts import mib
from .notes import TELLS, clip, ended, exception_finding, exception_text, ranks_word, undecided


def oom(v):
    ooms = v.f.of("oom")
    if not ooms:
        return None
    ranks = sorted({s.rank for s in ooms if s.rank is not None})
    if ranks:  # an unattributed line (a launcher's) adds nothing once a rank is named
        ooms = [s for s in ooms if s.rank is not None]
    for s in ooms:
        if s.data.get("killer") == "kernel":
            v.note(s.path, "memory_events", clip(s.line, 160))
        else:
            v.note(s.path, "console", f"rank {s.rank}: out of memory: {clip(s.line, 160)}")
    seq, op = v.stuck_seq(exclude=ranks)
    # the kernel's OOM killer (a cgroup's count, beside a SIGKILL) or an allocation that failed
    # in the rank (its own message): told apart because the fix is different
    killed = {s.rank: s for s in ooms if s.data.get("killer") == "kernel"}
    if ranks and set(killed) == set(ranks):
        limits = sorted({s.data["limit_bytes"] for s in killed.values()
                         if isinstance(s.data.get("limit_bytes"), int)})
        what = (f"{ranks_word(ranks).capitalize()} was killed (SIGKILL) by the kernel's OOM "
                f"killer inside {'its' if len(ranks) == 1 else 'their'} memory cgroup"
                + (f" (limit {' / '.join(map(mib, limits))})"
                   if limits else ""))
        for r in ranks:
            if (code := v.f.exit_code(r)) is not None:
                v.note("run.json" if r in v.f.exit_codes else "console", "exit",
                       f"rank {r}: {exit_summary(code)}")
        fix = ("Host memory, not the GPU's: fix that rank's use of it (data loader workers, "
               "pinned buffers, a leak) or give its cgroup (the job's memory request) more")
    else:
        what = (f"{ranks_word(ranks).capitalize()} ran out of memory" if ranks else
                "A rank (which one, the evidence does not say) ran out of memory")
        fix = "Fix the memory use on that rank (batch size, activation checkpointing, a leak)"
    return v.done("oom", ranks, seq, op,
                  what + (f" before collective #{seq} ({op})" if seq else "")
                  + "; the other ranks then waited for it in that collective until they "
                    f"failed or were stopped. {fix}; the hang is only a consequence.",
                  confident=bool(ranks), root=ranks)


def _sigkill_why(f, r: int) -> str:
    """What the evidence says about a SIGKILL's sender, without guessing: the OOM killer is
    named only when a memory cgroup counted a kill (then the ``oom`` rule has decided)."""
    if r in f.memory:
        return "; its memory cgroup counted no OOM kill: not the OOM killer"
    return "; could be the OOM killer; the evidence holds no memory events"


def start_up(v):
    """The start-up bound passed (``start_timeout``) before some ranks reached user code: the
    user's code is not what hung, whatever the stacks of the ranks already in it show."""
    f = v.f
    if f.phase != "start" or f.outcome != "hang":
        return None
    late = f.late or [r for r in f.ranks if r not in f.returned]
    for r in late:
        st = f.stacks.get(r)
        if st is not None and st.data.get("site"):
            v.note(st.path, "stack", f"rank {r} at start-up: {st.data['site']}")
    return v.done("start_timeout", late, None, None,
                  f"{ranks_word(late).capitalize()} never reached the user's function within "
                  f"the start-up bound: a fresh interpreter, imports and joining the process "
                  f"group took longer than start_timeout. On a busy machine, raise "
                  f"start_timeout; if the stacks show a rank waiting in the rendezvous, a peer "
                  f"never joined it (a wrong MASTER_ADDR/port, a firewall, a missing rank).",
                  confident=bool(late), root=late)


def exception(v):
    """A plain Python exception on some rank (not one that reports a lost peer, a timeout or
    a mismatch the collective library caught): the ranks that raised it are the culprits."""
    f = v.f
    # a rank dtlab or the launcher stopped (a pool's interrupt: KeyboardInterrupt) did not fail
    primary = [s for s in f.of("exception") if S.is_primary(s) and s.rank not in f.stopped]
    if not primary:
        return None
    ranks = sorted({s.rank for s in primary})
    first = {}
    for s in primary:
        first.setdefault(s.rank, s)
        v.note(s.path, "exception", exception_finding(s))
    kinds = {(s.data["type"], s.data["message"]) for s in first.values()}
    s0 = first[ranks[0]]
    what = exception_text(s0.data, 120) + (
        f" at {s0.data['site']}" if s0.data.get("site") else "")
    others = [r for r in f.ranks if r not in ranks]
    seq, op = v.stuck_seq(exclude=ranks)
    if len(kinds) == 1 and len(ranks) > 1:
        head = f"{ranks_word(ranks).capitalize()} each raised {what}"
    elif len(kinds) == 1:
        head = f"Rank {ranks[0]} raised {what}"
    else:
        head = (f"{ranks_word(ranks).capitalize()} raised Python exceptions (rank {ranks[0]}: "
                f"{what}; see the evidence for the others)")
    tail, after = "", ""
    if others:
        waiting = [r for r in others if f.of("peer_lost", r) or v.waiting_op(r)]
        tail = (f" while {ranks_word(waiting)} waited{v.where(seq, op)}; their errors only "
                f"report that a peer went away" if waiting else f" while {ranks_word(others)} ran on")
        after = "; the other ranks' errors are consequences"
    return v.done("exception", ranks, seq if others else None, op if others else None,
                  head + tail + ". This is a plain Python exception in the program, not a "
                  "failure of the collectives: fix it where it was raised" + after + ".",
                  root=ranks)


def died(v):
    """A rank that ended with no Python exception of its own: a nonzero exit code or a
    signal from outside the launcher, or exit code 0 before its function returned."""
    f = v.f
    dead = {}

    def exits(r):  # sys.exit() is a way to end, not a failure of its own
        return [s for s in f.of("exception", r) if s.data["type"].endswith("SystemExit")]

    def own_failure_elsewhere(r, code):
        # an uncaught Python exception ends a process with status 1: a rank that ended with
        # another status did not end of a traceback in its output (a process it started
        # shares its stderr: a fork of rank 1 raised there while rank 1 called os._exit(3))
        raised = len(f.of("exception", r)) > len(exits(r)) and not (code is not None and code > 1)
        if raised or f.of("watchdog", r):
            return True  # a Python failure, or NCCL's watchdog tearing the rank down
        fatal = f.of("fatal", r)
        # an abort inside the collective library: a symptom, not a death
        return bool(fatal and (fatal[0].data.get("cpp_message") or f.of("gloo_size", r)
                               or f.of("nccl_error", r)))

    def how_it_ended(r, code):
        if ex := exits(r):
            site = ex[0].data.get("site")
            return (f"{exit_summary(code)}: it called sys.exit({clip(ex[0].data['message'], 40)})"
                    + (f" at {site}" if site else ""))
        return ended(code) + (_sigkill_why(f, r) if code == -9 else "")

    for r, code in sorted(f.exit_codes.items()):
        if code is None or r in f.stopped:
            continue
        if code == 0:
            if r in f.returned:
                continue
            dead[r] = (how_it_ended(r, code) + " (an exit status keeps only the low 8 bits)"
                       if exits(r) else
                       "exit code 0 before its function returned: a sys.exit(0) or os._exit(0) in it?")
        elif not own_failure_elsewhere(r, code):
            dead[r] = how_it_ended(r, code)
    for r, code in sorted(f.reported_exits.items()):
        if r in dead or r in f.exit_codes or r in f.stopped or code == 0:
            continue
        if not own_failure_elsewhere(r, code):
            dead[r] = how_it_ended(r, code)
    if not dead:
        return None
    for r, why in sorted(dead.items()):
        v.note("run.json" if r in f.exit_codes else "console", "exit", f"rank {r}: {why}")
    ranks = sorted(dead)
    seq, op = v.stuck_seq(exclude=ranks)
    if seq and set(f.traces) - set(ranks):
        v.note(f.trace_files.get(min(set(f.traces) - set(ranks)), "traces"), f.trace_source,
               f"the other ranks' last collective: #{seq} ({op})")
    others = [r for r in f.ranks if r not in ranks]
    by_exit = all(exits(r) for r in ranks)  # ended themselves: no machine to blame
    return v.done("rank_died", ranks, seq, op,
                  f"{ranks_word(ranks).capitalize()} "
                  + ("ended" if by_exit else "died") + f" ({'; '.join(dead[r] for r in ranks)})"
                  + ((" while the others" + (f" waited{v.where(seq, op)}" if seq or op else " ran on")
                      + ", which can never complete without it") if others else "")
                  + (". Find why the program calls sys.exit there; the other ranks' errors are "
                     "consequences." if by_exit else
                     ". Look at that rank's own output and the machine's logs (dmesg: the OOM "
                     "killer, a node failure), not at the ranks that reported the hang."),
                  root=ranks)


def left_early(v):
    """Some ranks returned (or, per a launcher, exited 0) while others still waited in a
    collective: the ranks issued different numbers of collectives. The ranks that left ended
    the run; which side has the bug is decided by majority (with none, both are candidates)."""
    f = v.f
    left = set(f.returned)
    if f.reported_exits and not f.outside:
        # a launcher lists every rank that failed; a rank it does not list exited 0
        left |= {r for r in f.ranks if r not in f.reported_exits and r not in f.stopped}
    waiting = {r for r in f.ranks if r not in left and (v.waiting_op(r) or f.of("peer_lost", r))}
    if not waiting or (not left and not f.reported_exits):
        return None
    seq, op = v.stuck_seq(exclude=left)
    at = v.where(seq, op)
    for r in sorted(waiting):
        v.note("console", "traceback/stacks", f"rank {r} was still waiting{at}")
    if not left:  # e.g. a torchrun console: the rank that left is not named anywhere
        return v.done("missing_collective", [], seq, op,
                      f"Every failure reported is a rank that lost its peer ({ranks_word(waiting)}"
                      f", waiting{at}); a launcher's 'Root Cause' is only the first rank it saw "
                      f"fail. The rank that ended the run left without failing -- it returned or "
                      f"exited with code 0, so the launcher lists no failure for it: a rank of "
                      f"the job not named here. It issued fewer collectives than the others "
                      f"(or they one more): compare each rank's path through the program.",
                      confident=False)
    v.note("run.json" if left & f.returned else "console", "exit",
           f"{ranks_word(left)} left (returned or exited with code 0) while the others waited")
    culprits, confident = vote({("left",): sorted(left), ("waiting",): sorted(waiting)})
    head = (f"{ranks_word(left).capitalize()} left (returned normally or exited with code 0) "
            f"while {ranks_word(waiting)} still waited{at}; their errors only report that a "
            f"peer went away. The ranks issued different numbers of collectives. ")
    if confident:
        why = (f"{ranks_word(culprits).capitalize()} took a different path (a collective "
               f"skipped or added inside a rank-dependent branch).")
    else:
        why = (f"Either {ranks_word(left)} skipped a collective (or left its loop early) or "
               f"{ranks_word(waiting)} issued one extra. " + undecided(culprits, TELLS))
    return v.done("missing_collective", culprits, seq, op, head + why, confident, root=left)
