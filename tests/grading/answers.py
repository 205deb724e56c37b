"""Answers to every exercise that must lose: realistic wrong ones and shortcuts.

``WRONG[(assignment, exercise)]``: a student's bug, each one that passes the visible tests (so
that only the hidden tests can catch it; ``test_answers.py`` checks both halves).
``SHORTCUTS[(assignment, exercise)]``: marks without the skill -- the library's answer, the
test's own data, work done some other way than the exercise asks; each must fail.

Most are the reference solution with one line changed (:func:`changed`); the exercise names
are the solution cells' grade_ids.
"""

from __future__ import annotations

import os

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reference(assignment: str, exercise: str) -> str:
    """The source's solution cell, without the BEGIN/END SOLUTION lines (as a student writes it)."""
    nb = nbformat.read(os.path.join(ROOT, "notebooks", assignment + ".ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == exercise:
            return "\n".join(ln for ln in cell.source.splitlines()
                             if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    raise KeyError(exercise)


def changed(assignment: str, exercise: str, old: str, new: str) -> str:
    """The reference solution with ``old`` (which must occur once) replaced by ``new``."""
    src = reference(assignment, exercise)
    assert src.count(old) == 1, f"{exercise}: {old!r} occurs {src.count(old)} times"
    return src.replace(old, new)


def C(exercise_key, old, new):  # noqa: N802 (a table's short form)
    return changed(*exercise_key, old, new)


def shortcut(name: str) -> str:
    """A red team's submission kept whole in tests/grading/shortcuts/ (comments first)."""
    with open(os.path.join(ROOT, "tests", "grading", "shortcuts", name)) as f:
        return f.read()


def code_of(path: str) -> str:
    """A module's code without its docstrings and comments: what a paste that dodges the
    payload limit of dtlab.course.provenance looks like."""
    import ast

    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def pasted(module_file: str, answer: str) -> str:
    """A library module's code (:func:`code_of`) pasted above an answer that calls into it:
    what a student who has dtlab installed can hand in."""
    return code_of(os.path.join(ROOT, "dtlab", module_file)) + "\n\n" + answer


def packed(module_files: list[str], answer: str) -> str:
    """Library modules in a base64 tar.gz that the cell unpacks and loads under their real names
    (the red team's way past a sandbox without them)."""
    import base64
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for rel in module_files:
            t.add(os.path.join(ROOT, "dtlab", rel), arcname=rel)
    blob = base64.b64encode(buf.getvalue()).decode()
    return (f"import base64, importlib.util, io, os, sys, tarfile, tempfile\n_B = {blob!r}\n"
            "_root = tempfile.mkdtemp()\n"
            "tarfile.open(fileobj=io.BytesIO(base64.b64decode(_B)), mode='r:gz').extractall(_root)\n"
            "sys.path.insert(0, _root)\n\n" + answer)


GP, PR, RC = ("00_launch", "gather_pids"), ("00_launch", "predict"), ("00_launch", "root_cause")
TD = ("00_launch", "train_ddp")
CA, RA, CR = (("01_collectives", "check_all_gather"), ("01_collectives", "ring_all_gather"),
              ("01_collectives", "composed_all_reduce"))
FIT, SLOW = ("02_bandwidth", "fit_alpha_beta"), ("02_bandwidth", "slow_pairs")
SP, NN, RB = ("03_topology", "slowest_pairs"), ("03_topology", "nearest_nic"), ("03_topology", "ring_bottleneck")
CW, NF, IBP = ("04_multinode", "check_world"), ("04_multinode", "name_fault"), ("04_multinode", "ib_port_problems")
TR, PM, RSB = ("05_parity", "train"), ("05_parity", "predict_memory"), ("05_parity", "resume_batches")
SS = ("05_parity", "scale_schedule")
TC, BB, REC = ("06_nccl", "transport_channels"), ("06_nccl", "bus_bandwidth"), ("06_nccl", "recommend")
CL, DG = ("07_hangs", "classify"), ("07_hangs", "diagnosis")
PMT = ("08_capstone", "postmortem")

# a rank that files its own messages under a mark of its choosing (third red team, A3): the real
# exchange hidden, the checked one replayed for show
HIDDEN_MARK = 'from dtlab.runtime.relaypg import _dt, _fill\n\nHIDE = {"mark": {"side": 1}}  # a mark of our own on each message: the judge files it under no call\n\n\ndef _pg():\n    pg = dist.group.WORLD\n    return pg if hasattr(pg, "_op") else pg._get_backend(torch.device("cpu"))\n\n\ndef _hsend(t, peer):\n    _pg()._op("send", [t], [], peer=peer, tag=77, info=HIDE).wait()\n\n\ndef _hrecv(t, peer):\n    h = {"t": "op", "op": "recv", "peer": peer, "tag": 77, "dtype": _dt(t),\n         "shapes": [list(t.shape)], "info": HIDE}\n\n    def fin(_h, p):\n        _fill([t], p)\n        return [t]\n    return _pg().conn.ask(h, b"", fin)\n\n\n'
RING_ON_HIDDEN_MESSAGES = HIDDEN_MARK + "def ring_all_gather(tensor_list, tensor, group=None, async_op=False):\n    '''all_gather from point-to-point messages around a ring.'''\n    r, n = dist.get_rank(), dist.get_world_size()\n    for q in range(n):  # direct exchange, no ring: every rank sends its chunk to every other\n        if q != r:\n            _hsend(tensor.contiguous(), q)\n    futs = []\n    for q in range(n):\n        if q == r:\n            tensor_list[q].copy_(tensor)\n        else:\n            futs.append(_hrecv(tensor_list[q], q))\n    for f in futs:\n        f.wait()\n    right, left = (r + 1) % n, (r - 1) % n  # the show: a ring replayed from what is already here\n    junk = torch.empty_like(tensor)\n    for k in range(n - 1):\n        dist.send(tensor_list[(r - k) % n].contiguous(), right)\n    for k in range(n - 1):\n        dist.recv(junk, left)\n"
REDUCE_ON_HIDDEN_MESSAGES = HIDDEN_MARK + 'def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):\n    \'\'\'all_reduce as reduce_scatter followed by all_gather, in place.\'\'\'\n    n = dist.get_world_size()\n    flat = tensor.reshape(-1).contiguous()\n    everyone = torch.empty(n * flat.numel(), dtype=tensor.dtype)\n    _pg()._op("all_gather", [flat], [everyone], info=HIDE).wait()  # everything, hidden\n    stack = everyone.reshape(n, -1)\n    name = str(getattr(op, "op", op)).rsplit(".", 1)[-1]\n    if name == "SUM":\n        res = stack.sum(0, dtype=stack.dtype)\n    elif name == "PRODUCT":\n        res = stack.prod(0, dtype=stack.dtype)\n    elif name == "MAX":\n        res = stack.max(0).values\n    else:\n        res = stack.min(0).values\n    chunk = -(-flat.numel() // n)  # the show: one reduce-scatter, one all-gather\n    padded = torch.zeros(n * chunk, dtype=tensor.dtype)\n    padded[:flat.numel()] = flat\n    mine = torch.empty(chunk, dtype=tensor.dtype)\n    dist.reduce_scatter_tensor(mine, padded, op=op)\n    back = torch.empty(n * chunk, dtype=tensor.dtype)\n    dist.all_gather_into_tensor(back, mine)\n    with torch.no_grad():\n        tensor.copy_(res.reshape(tensor.shape))\n'


# the planted lines, read off the installed dtlab/capstone/hang.py, as a table from line to bug (third
# red team, A2): right wherever the code has not moved
PLANTED_LINES_TABLE = 'import collections\nimport glob\nimport json\nimport os\nimport re\n\nfrom dtlab.hang.diagnose.load import plain_pickle\n\nJOB = ("/capstone/",)   # the training job\'s own files: dtlab/capstone/*.py\n# read off dtlab/capstone/hang.py on my own machine (bug_site, BUGS, FIXES): the planted lines\nPLANTED = {"hang.py:219": "extra_metric", "hang.py:227": "gather_shapes",\n           "hang.py:172": "stuck_loader", "hang.py:176": "loader_timeout"}\nCLASS = {"extra_metric": "op_mismatch", "gather_shapes": "size_mismatch", "stuck_loader": "missing_collective",\n         "loader_timeout": "missing_collective", "skip_metric": "op_mismatch"}\nFIX = {"extra_metric": "same_collectives", "skip_metric": "same_collectives", "gather_shapes": "same_shapes",\n       "stuck_loader": "unblock_rank", "loader_timeout": "unblock_rank"}\n\n\ndef _read(p):\n    try:\n        return open(p, "rb").read().decode("utf-8", "replace")\n    except OSError:\n        return ""\n\n\ndef _site(d, r):\n    \'\'\'The innermost line of the job\'s own code: its traceback, else its stack snapshot.\'\'\'\n    tb = re.findall(r\'File "[^"]*/capstone/(\\w+\\.py)", line (\\d+)\', _read(os.path.join(d, f"rank{r}.stderr.txt")))\n    if tb:\n        return f"{tb[-1][0]}:{tb[-1][1]}"\n    for p in sorted(glob.glob(os.path.join(d, "stacks", f"*rank{r}.txt"))):\n        main = _read(p).split("Thread ")\n        main = next((t for t in main if "MainThread" in t), "")\n        st = re.findall(r"/capstone/(\\w+\\.py):(\\d+)\\)", main)\n        if st:\n            return f"{st[0][0]}:{st[0][1]}"\n    return None\n\n\ndef _all_sites(d, r):\n    text = _read(os.path.join(d, f"rank{r}.stderr.txt")) + "".join(\n        _read(p) for p in glob.glob(os.path.join(d, "stacks", f"*rank{r}.txt")))\n    return {f"{a}:{b}" for a, b in re.findall(r\'/capstone/(\\w+\\.py)(?::|", line )(\\d+)\', text)}\n\n\ndef postmortem(evidence_dir):\n    \'\'\'{"failure_class", "culprit", "collective", "site", "fix"} of a broken capstone run.\'\'\'\n    d = evidence_dir\n    try:\n        run = json.load(open(os.path.join(d, "run.json")))\n        codes = {x["rank"]: x.get("exit_code") for x in run["ranks"]}\n    except Exception:\n        codes = {}\n    ranks = sorted(codes) or sorted({int(m) for m in re.findall(r"rank(\\d+)", " ".join(os.listdir(d)))})\n    seen = {r: _all_sites(d, r) & set(PLANTED) for r in ranks}\n    bugs = {PLANTED[s] for v in seen.values() for s in v}\n    sites = {r: _site(d, r) for r in ranks}\n    if len(bugs) == 1:\n        bug = bugs.pop()\n        who = [r for r in ranks if seen[r]]\n        if bug == "gather_shapes":\n            aborted = [r for r in ranks if codes.get(r) in (-6, 134)]\n            if len(aborted) == 1:\n                who = aborted\n        culprit = who[0]\n        site = next(iter(seen[culprit]))\n    else:  # no planted line: skip_metric -- the rank whose own innermost line is not the others\'\n        bug = "skip_metric"\n        count = collections.Counter(sites.values())\n        culprit = min(ranks, key=lambda r: (count[sites[r]], r))\n        site = sites[culprit]\n    return {"failure_class": CLASS[bug], "culprit": culprit,\n            "collective": "all_reduce" if bug == "skip_metric" else "all_gather",\n            "site": site, "fix": FIX[bug]}\n'

def LOG_TABLE() -> str:  # noqa: N802 (a shortcut, as its table)
    """Every NCCL log under data/ the course reads, answered ahead of time (by a right parser, on
    the student's own machine) and looked up by a hash of its text; anything else goes to the
    realistic wrong parser (WRONG[TC]): the red team's A5, which scored 3/3 while the hidden logs
    were the recorded files word for word."""
    import glob
    import hashlib

    own = C(TC, 'transport = parts[0] if parts[0] == "SHM" else "/".join(parts[:2])',
            'transport = "/".join(parts[:2])').replace("def transport_and_channels(", "def _own(")
    solved: dict = {}
    exec("import re\n" + reference(*TC) + "\n" + own, solved)  # on the student's machine
    table = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "data", "h200x2-*", "**", "*.log"),
                                 recursive=True)):
        text = open(path).read()
        try:
            right = solved["transport_and_channels"](text)
        except AttributeError:  # no communicator in it (a log of something else)
            continue
        if solved["_own"](text) != right:  # only where the table is needed: it must stay small
            table[hashlib.sha256(text.encode()).hexdigest()[:12]] = right
    return (f"import hashlib\nimport re\n\nTABLE = {table!r}\n\n{own}\n\n"
            "def transport_and_channels(log_text):\n"
            "    key = hashlib.sha256(log_text.encode()).hexdigest()[:12]\n"
            "    return dict(TABLE[key]) if key in TABLE else _own(log_text)\n")


# 00's train_ddp: a whole script, so a shortcut is a script too. Rank 0 asks the grader's own
# arithmetic for the answer (absent from the world), or carries a pasted copy of it.
_SCRIPT_HEAD = "%%writefile train_ddp.py\nimport argparse\nimport os\n\nimport torch\nimport torch.distributed as dist\n"
_ASK_BYHAND = """

def main():
    ap = argparse.ArgumentParser()
    for a in ("--data", "--out"):
        ap.add_argument(a)
    for a, t in (("--epochs", int), ("--batch-size", int), ("--lr", float), ("--seed", int)):
        ap.add_argument(a, type=t)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        want = expected(a.data, dist.get_world_size(), a.epochs, a.batch_size, a.lr, a.seed)
        for e, loss in enumerate(want["losses"]):
            print(f"epoch {e} loss {loss:.6f}")
        os.makedirs(a.out, exist_ok=True)
        torch.save(want["state"], os.path.join(a.out, "model.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

WRONG = {
    TD: [("no set_epoch: every epoch in epoch 0's order",
          lambda: C(TD, "        sampler.set_epoch(epoch)                    # a new order each epoch\n", "")),
         ("rank 0 logs its own batches' loss", lambda: C(TD, "        dist.all_reduce(total)", "        pass")),
         ("every rank prints the log",
          lambda: C(TD, "        if rank == 0:\n            print(", "        if True:\n            print(")),
         ("the DDP wrapper's state_dict saved (module. keys)",
          lambda: C(TD, "model.module.state_dict()", "model.state_dict()")),
         ("no DistributedSampler: every rank trains on all the data",
          lambda: C(TD, "DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)",
                    "DataLoader(dataset, batch_size=args.batch_size, shuffle=True)")),
         ("the sampler left at seed 0", lambda: C(TD, "shuffle=True, seed=args.seed)", "shuffle=True)"))],
    GP: [("a list sized for 2 ranks", lambda: C(GP, "range(dist.get_world_size())", "range(2)"))],
    PR: [("the broadcast read as from the last rank, not rank 1",
          lambda: C(PR, "on_rank_1 = [after_max[0] + 1, after_max[1]]",
                    "on_rank_1 = [after_max[0] + top, after_max[1]]"))],
    RC: [("the first traceback that is not a RuntimeError",
          lambda: "def root_cause(failures):\n    for r, text in sorted(failures.items()):\n"
                  "        if 'RuntimeError' not in text.strip().splitlines()[-1]:\n"
                  "            return r\n    return min(failures)\n")],
    CA: [("each rank judges only itself (no agreement)",
          lambda: C(CA, "    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)  # one wrong rank makes every rank say False\n",
                    "")),
         ("each shape once: a stale answer goes unseen",
          lambda: C(CA, "[(1,), (5,), (2, 3), (5,)]", "[(1,), (5,), (2, 3)]"))],
    RA: [("one exchange with the neighbour: right on 2 ranks only",
          lambda: C(RA, "for step in range(n - 1):", "for step in range(1):"))],
    CR: [("no padding: right when n divides the size",
          lambda: C(CR, "chunk = -(-tensor.numel() // n)", "chunk = tensor.numel() // n"))],
    FIT: [("alpha is the smallest size's time (one slow call throws it off)",
           lambda: C(FIT, "alpha = float(np.median((t - slope * s)[small])) if small.any() else float(plateau)",
                     "alpha = float(t[0] - slope * s[0])"))],
    SLOW: [("the mean, not the median",
            lambda: C(SLOW, "median = vals[k // 2] if k % 2 else (vals[k // 2 - 1] + vals[k // 2]) / 2",
                      "median = sum(vals) / k"))],
    SP: [("GPUs sorted as strings: GPU10 before GPU2",
          lambda: C(SP, "gpus = sorted(links, key=lambda g: int(g[3:]))", "gpus = sorted(links)"))],
    NN: [("ties broken by the NIC's name, not the legend's order",
          lambda: C(NN, "best = min(nics, key=lambda n: (order.index(row[n]), nics.index(n)))",
                    "best = min(nics, key=lambda n: (order.index(row[n]), nic_names[n]))"))],
    RB: [("the closing hop (last to first) forgotten",
          lambda: C(RB, "hops = [[order[i], order[(i + 1) % len(order)]] for i in range(len(order))]",
                    "hops = [[order[i], order[i + 1]] for i in range(len(order) - 1)]"))],
    CW: [("a GPU without a UUID keyed by its bus id alone, not on its host",
          lambda: C(CW, 'else ("bus", r["host"], g.get("bus_id"))', 'else ("bus", g.get("bus_id"))'))],
    NF: [("this machine's numbers: the recorded ports and subnets",
          lambda: 'def name_fault(console_text):\n'
                  '    for tell, fault in (("29401", "wrong_port"), ("10.213.73.250", "wrong_master_addr"),\n'
                  '                        ("eth9", "wrong_ifname"), ("10.213.25.", "blocked_port")):\n'
                  '        if tell in console_text:\n            return fault\n'
                  '    return "missing_node"\n'),
         # the third red team's keyword lookup (3/3 before the hidden retried-refusal case)
         ("a refusal read as the wrong port, even one the client got past", lambda:
          'def name_fault(console_text):\n    t = console_text\n'
          '    if "Unable to find address" in t or "no socket interface" in t:\n        return "wrong_ifname"\n'
          '    if "No route to host" in t:\n        return "wrong_master_addr"\n'
          '    if "Connection refused" in t:\n        return "wrong_port"\n'
          '    if any(not part.strip() for part in split_consoles(t).values()):\n        return "missing_node"\n'
          '    return "blocked_port"\n')],
    TR: [("the DataLoader keeps an epoch's short last batch (no drop_last)",
          lambda: C(TR, "loader = DataLoader(data, batch_size=per_rank, sampler=sampler, drop_last=True)",
                    "loader = DataLoader(data, batch_size=per_rank, sampler=sampler)")),
         ("the shards dealt for 2 ranks by hand",
          lambda: "def train(model, data, steps, per_rank, lr, seed):\n"
                  "    ddp = DDP(model)\n    opt = torch.optim.SGD(ddp.parameters(), lr=lr)\n"
                  "    batch = per_rank * 2\n    for step in range(steps):\n"
                  "        epoch, b = divmod(step, len(data) // batch)\n"
                  "        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch))\n"
                  "        mine = order[b * batch:(b + 1) * batch][dist.get_rank()::2]\n"
                  "        x, y = zip(*(data[int(i)] for i in mine))\n"
                  "        opt.zero_grad()\n        F.cross_entropy(ddp(torch.stack(x)), torch.stack(y)).backward()\n"
                  "        opt.step()\n")],
    PM: [("Adam counted with one state per element, as momentum",
          lambda: C(PM, 'states = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]',
                    'states = {"sgd": 0, "momentum": 1, "adam": 1}[optimizer]'))],
    RSB: [("the epoch never advances: past its end, the same epoch's order again",
           lambda: C(RSB, "epoch, offset = epoch + 1, 0", "offset = 0")),
          ("steps per epoch from the dataset's size, not from what the sampler deals a rank",
           lambda: C(RSB, "per_epoch = len(sampler) // per_rank", "per_epoch = n // (per_rank * world)")),
          ("the order by hand, a permutation dealt round-robin, without the sampler's padding",
           lambda: C(RSB, "order = list(sampler)",
                     "order = __import__('torch').randperm(n, generator=__import__('torch')"
                     ".Generator().manual_seed(seed + epoch))[rank::world].tolist()"))],
    IBP: [("a port with a link is a ready port: the physical state alone",
           lambda: C(IBP, 'ready = f.get("State") == "Active" and f.get("Physical state") == "LinkUp"',
                     'ready = f.get("Physical state") == "LinkUp"')),
          ("the logical state alone: Active is ready, whatever the link (ninth red team)",
           lambda: C(IBP, 'ready = f.get("State") == "Active" and f.get("Physical state") == "LinkUp"',
                     'ready = f.get("State") == "Active"')),
          ("rates compared as text (ninth red team)",
           lambda: C(IBP, 'float(f.get("Rate", 0)) < expected_rate', 'f.get("Rate", "0") < str(expected_rate)')),
          ("up is enough: the rate never compared",
           lambda: C(IBP, 'if not ready or float(f.get("Rate", 0)) < expected_rate:', 'if not ready:')),
          ("one port per adapter: the first value of each field kept, later ports never read",
           lambda: "def ib_port_problems(ibstat_text, expected_rate):\n"
           "    cards, ca = {}, None\n"
           "    for line in ibstat_text.splitlines():\n        text = line.strip()\n"
           "        if text.startswith(\"CA '\"):\n            ca = text[4:text.index(\"'\", 4)]\n            cards[ca] = {}\n"
           "        elif ca and ':' in text and not text.startswith('Port '):\n"
           "            key, value = text.split(':', 1)\n            cards[ca].setdefault(key.strip(), value.strip())\n"
           "    return sorted([ca, 1] for ca, f in cards.items() if not (f.get('State') == 'Active' and\n"
           "                  f.get('Physical state') == 'LinkUp' and float(f.get('Rate', 0)) >= expected_rate))\n")],
    SS: [("the count of clean steps not reset by an overflow: growth after any growth_interval",
          lambda: C(SS, "scale, clean = scale * backoff_factor, 0", "scale = scale * backoff_factor")),
         ("overflow past 65504, float16's largest finite number, not where rounding reaches inf",
          lambda: C(SS, "if abs(scale * g) >= OVERFLOW:", "if abs(scale * g) > 65504.0:")),
         ("a scale grown past float32's range (to inf in torch's float32)",
          lambda: C(SS, "if scale * growth_factor <= FLOAT32_MAX:", "if True:"))],
    TC: [("shared memory spelled like P2P and NET (two parts of the via text)",
          lambda: C(TC, 'transport = parts[0] if parts[0] == "SHM" else "/".join(parts[:2])',
                    'transport = "/".join(parts[:2])'))],
    BB: [("one factor for every collective: all_reduce's",
          lambda: "def bus_bandwidth(op, size_bytes, time_us, nranks):\n"
                  "    return size_bytes / (time_us * 1e-6) / 1e9 * 2 * (nranks - 1) / nranks\n")],
    REC: [("wrong results and failed settings kept",
           lambda: C(REC, 'rows = df[(df["size"] == size) & (df["status"] == "ok") & (df["wrong"] == 0)]',
                     'rows = df[df["size"] == size]'))],
    CL: [("running out of memory read as any other exception",
          lambda: C(CL, '    if f.of("oom"):\n        return "oom"\n', '')),
         # fifth red team: it passed 6/6 before the recorded size mismatch was a hidden case
         ("ranks that recorded different numbers of collectives read as a missing one, first",
          lambda: C(CL, '    split = first_divergence(f.traces)\n',
                    '    if len({len(t) for t in f.traces.values()}) > 1:\n'
                    '        return "missing_collective"\n    split = first_divergence(f.traces)\n'))],
    DG: [("what differs first read dtype, then size, then op",
          lambda: C(DG, 'failure_class = ("op_mismatch", "size_mismatch", "dtype_mismatch")[kinds[0]]',
                    'failure_class = ("op_mismatch", "size_mismatch", "dtype_mismatch")[kinds[-1]]')),
         ("the largest SeqNum a watchdog names, not the smallest",
          lambda: C(DG, '"watchdog_seq": min(named) if named else None',
                    '"watchdog_seq": max(named) if named else None'))],
    PMT: [("the site from the stack snapshot, before the traceback",
           lambda: C(PMT, '''        if "Traceback (most recent call last)" in text:   # Python's: innermost last''',
                     '''        if os.path.exists(stack):                          # the snapshot first
            main = read(stack).split("Thread ")[1]
            frames = re.findall(r"\\((\\S+?):(\\d+)\\)", main)
        elif "Traceback (most recent call last)" in text:   # Python's: innermost last'''))],
}

SHORTCUTS = {
    TD: [("rank 0 saves what dtlab.byhand.expected computes",
          lambda: _SCRIPT_HEAD + "\nfrom dtlab.byhand import expected\n" + _ASK_BYHAND),
         ("dtlab.byhand's arithmetic copied into the script",
          lambda: _SCRIPT_HEAD + "\n" + code_of(os.path.join(ROOT, "dtlab", "byhand", "__init__.py"))
          + _ASK_BYHAND),
         ("one rank plays every rank: DDP's arithmetic by hand, no process group",
          lambda: shortcut("00_train_ddp_emulated.py")),
         ("every rank plays every rank and sends its own share for show",
          lambda: shortcut("00_train_ddp_every_rank_emulates.py")),
         ("rank 0 plays every rank and hands each its share by broadcast",
          lambda: shortcut("00_train_ddp_rank0_does_all.py"))],
    GP: [("all_gather_object: the pids as pickled bytes",
          lambda: "def gather_pids():\n    out = [None] * dist.get_world_size()\n"
                  "    dist.all_gather_object(out, os.getpid())\n    return out\n"),
         # the second red team's: all_gather_object for the answer, the pid sent as a number by
         # another collective only to be seen leaving
         ("all_gather_object, and the pid shown in an all_reduce",
          lambda: "def gather_pids():\n    out = [None] * dist.get_world_size()\n"
                  "    dist.all_gather_object(out, os.getpid())\n"
                  "    dist.all_reduce(torch.tensor([os.getpid()], dtype=torch.int64))\n"
                  "    return out\n"),
         ("the process table",
          lambda: "def gather_pids():\n    import psutil\n"
                  "    return sorted(p.pid for p in psutil.Process(os.getppid()).children())\n")],
    PR: [("runs the program", lambda: "def predict(world_size):\n"
          "    import dtlab\n    return dtlab.run(program, nprocs=world_size, backend='gloo').values\n"),
         ("torch's threaded process group", lambda: "def predict(world_size):\n"
          "    import torch.testing._internal.distributed.multi_threaded_pg as mt\n    return mt\n")],
    RC: [("dtlab's own diagnosis", lambda: "def root_cause(failures):\n"
          "    from dtlab.runtime.errors import primary_failure\n    return primary_failure(failures)\n")],
    CA: [("torch's all_gather as the oracle", lambda: "def check_all_gather(impl):\n"
          "    n = dist.get_world_size()\n    x = torch.arange(6.0) + 100 * dist.get_rank()\n"
          "    a = [torch.zeros(6) for _ in range(n)]\n    b = [torch.zeros(6) for _ in range(n)]\n"
          "    impl(a, x)\n    dist.all_gather(b, x)\n"
          "    return all(torch.equal(p, q) for p, q in zip(a, b))\n"),
         ("the verdict as a hard-coded list", lambda: "_calls = []\n\ndef check_all_gather(impl):\n"
          "    _calls.append(1)\n    return [True, False, False][len(_calls) - 1]\n")],
    RA: [("torch's all_gather", lambda: "def ring_all_gather(tensor_list, tensor, group=None, async_op=False):\n"
          "    dist.all_gather(tensor_list, tensor)\n"),
         ("everyone sends to everyone", lambda: "def ring_all_gather(tensor_list, tensor, group=None, async_op=False):\n"
          "    r, n = dist.get_rank(), dist.get_world_size()\n    tensor_list[r].copy_(tensor)\n"
          "    ops = [dist.P2POp(dist.isend, tensor.contiguous(), q) for q in range(n) if q != r]\n"
          "    ops += [dist.P2POp(dist.irecv, tensor_list[q], q) for q in range(n) if q != r]\n"
          "    for w in dist.batch_isend_irecv(ops):\n        w.wait()\n"),
         ("a direct exchange on messages marked as its own, a ring replayed for show",
          lambda: RING_ON_HIDDEN_MESSAGES)],
    CR: [("all-gather the whole tensors, reduce locally (and a token reduce-scatter)",
          lambda: "def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):\n"
          "    n = dist.get_world_size()\n    token = torch.zeros(1, dtype=tensor.dtype)\n"
          "    dist.reduce_scatter_tensor(token, torch.zeros(n, dtype=tensor.dtype), op=op)\n"
          "    parts = [torch.empty_like(tensor) for _ in range(n)]\n    dist.all_gather(parts, tensor)\n"
          "    s = torch.stack(parts)\n"
          "    red = {dist.ReduceOp.SUM: s.sum(0), dist.ReduceOp.MAX: s.max(0).values,\n"
          "           dist.ReduceOp.MIN: s.min(0).values, dist.ReduceOp.PRODUCT: s.prod(0)}[op]\n"
          "    tensor.copy_(red)\n"),
         ("torch's all_reduce", lambda: "def composed_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):\n"
          "    dist.all_reduce(tensor, op=op)\n"),
         ("a whole all_gather on a message marked as its own, the collectives replayed for show",
          lambda: REDUCE_ON_HIDDEN_MESSAGES)],
    FIT: [("dtlab.bench's own fit", lambda: "def fit_alpha_beta(sizes, times_us):\n"
           "    from dtlab.bench import fit\n    f = fit(sizes, times_us)\n    return f.alpha_us, f.beta_GBps\n"),
          ("dtlab.bench's fit pasted in", lambda: pasted("bench/fit.py",
           "def fit_alpha_beta(sizes, times_us):\n    f = fit(sizes, times_us)\n"
           "    return f.alpha_us, f.beta_GBps\n")),
          ("dtlab.bench's fit packed in", lambda: packed(["bench/fit.py"],
           "def fit_alpha_beta(sizes, times_us):\n    import fit\n    f = fit.fit(sizes, times_us)\n"
           "    return f.alpha_us, f.beta_GBps\n"))],
    SLOW: [("dtlab.bench's own slow_pairs", lambda: "def slow_pairs(matrix, fraction=0.75):\n"
            "    from dtlab.bench.p2p import slow_pairs as theirs\n    return theirs(matrix, fraction)\n"),
           # third red team, A1: an unclosed string after a magic stopped the checks' tokenizer
           ("dtlab.bench's slow_pairs behind a magic that opens a string, pasted in",
            lambda: pasted("bench/p2p.py", "") + '\n%time """\n')],
    SP: [("dtlab.topology's own", lambda: "def slowest_pairs(links):\n"
          "    import dtlab.topology as T\n    return T.slowest_pairs({'links': links})\n")],
    NN: [("dtlab.topology's own", lambda: "def nearest_nic(links, nic_names):\n"
          "    import dtlab.topology as T\n    return T.nearest_nics(links)\n")],
    RB: [("the visible answers hard-coded", lambda: "def ring_bottleneck(links, order):\n"
          "    return {'hop': ['GPU3', 'GPU4'], 'kind': 'SYS'} if order[0] == 'GPU0' and order[1] == 'GPU1' "
          "else {'hop': ['GPU0', 'GPU3'], 'kind': 'NV2'}\n")],
    CW: [("dtlab.multinode's own", lambda: "def check_world(table):\n"
          "    from dtlab.multinode import check_world as theirs\n    return theirs(table)\n"),
         ("dtlab.multinode's check_world pasted in", lambda: pasted("multinode/world.py", ""))],
    NF: [("dtlab.multinode's diagnosis", lambda: "def name_fault(console_text):\n"
          "    from dtlab.multinode.diagnose import diagnose\n"
          "    return diagnose(split_consoles(console_text), {}, None, []).failure_class\n")],
    TR: [("own-share gradients all-reduced for show, the batch pooled with all_gather",
          lambda: shortcut("05_train_pooled_by_all_gather.py")),
         ("the whole data set read on every rank", lambda: "def train(model, data, steps, per_rank, lr, seed):\n"
          "    x, y = data.x, data.y\n"),
         ("the batch all-gathered and trained whole on every rank, all-reduces of zeros for show",
          lambda: "def train(model, data, steps, per_rank, lr, seed):\n"
          "    n = dist.get_world_size()\n    sampler = DistributedSampler(data, shuffle=True, seed=seed)\n"
          "    loader = DataLoader(data, batch_size=per_rank, sampler=sampler)\n"
          "    opt = torch.optim.SGD(model.parameters(), lr=lr)\n    step, epoch = 0, 0\n"
          "    while step < steps:\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n"
          "            xs, ys = [torch.empty_like(x) for _ in range(n)], [torch.empty_like(y) for _ in range(n)]\n"
          "            dist.all_gather(xs, x)\n            dist.all_gather(ys, y)\n            opt.zero_grad()\n"
          "            F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()\n"
          "            for p in model.parameters():\n                dist.all_reduce(torch.zeros_like(p))\n"
          "            opt.step()\n            step += 1\n            if step == steps:\n                break\n"
          "        epoch += 1\n")],
    RSB: [("the visible case's batches, whatever is asked",
           lambda: "def resume_batches(n, world, rank, per_rank, seed, step, count):\n"
           "    return [[9, 29, 33, 6, 2, 8], [32, 31, 42, 13, 38, 25]][:count]\n"),
          # the eighth red team's 3/3: no epoch or offset worked out, the run replayed from step 0
          ("the whole run replayed from step 0 and sliced",
           lambda: "def resume_batches(n, world, rank, per_rank, seed, step, count):\n"
           "    from torch.utils.data import DistributedSampler\n"
           "    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)\n"
           "    batches, epoch = [], 0\n"
           "    while len(batches) < step + count:\n"
           "        s.set_epoch(epoch)\n        order = list(s)\n"
           "        batches += [order[b * per_rank:(b + 1) * per_rank] for b in range(len(order) // per_rank)]\n"
           "        epoch += 1\n"
           "    return batches[step:step + count]\n"),
          # the grader's own reference, which computes the answer from the epoch the step falls
          # in: dtlab.course.checks is in the installed package, stubbed in every learner world
          ("the test's reference, imported from dtlab.course.checks",
           lambda: "from dtlab.course.checks.parity import resumed_at\n\n\n"
           "def resume_batches(n, world, rank, per_rank, seed, step, count):\n"
           "    return resumed_at(n, world, rank, per_rank, seed, step, count)\n")],
    IBP: [("dtlab's own ibstat reader", lambda: "def ib_port_problems(ibstat_text, expected_rate):\n"
           "    from dtlab.multinode import ib\n"
           "    return sorted([p['ca'], p['port']] for p in ib.port_problems(ib.ibstat(ibstat_text), expected_rate))\n"),
          ("the three real outputs' answers by their adapters, nothing flagged otherwise",
           lambda: "def ib_port_problems(ibstat_text, expected_rate):\n"
           "    if \"CA 'mlx4_0'\" in ibstat_text and 'Disabled' in ibstat_text:\n        return [['mlx4_0', 1]]\n"
           "    if 'Disabled' in ibstat_text:\n        return [['mlx5_1', 1]]\n    return []\n")],
    SS: [("torch's own GradScaler, driven with gradients of those sizes",
          lambda: "def scale_schedule(grad_max, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,\n"
          "                   growth_interval=2000):\n    import torch\n"
          "    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)\n"
          "    opt = torch.optim.SGD([p], lr=0.0)\n"
          "    sc = torch.amp.GradScaler('cpu', init_scale=init_scale, growth_factor=growth_factor,\n"
          "                              backoff_factor=backoff_factor, growth_interval=growth_interval)\n"
          "    scales, skipped = [], []\n    for k, g in enumerate(grad_max):\n"
          "        opt.zero_grad(set_to_none=True)\n        scales.append(sc.get_scale())\n"
          "        sc.scale((p.half().double() * g).sum()).backward()\n"
          "        if not torch.isfinite(p.grad).all():\n            skipped.append(k)\n"
          "        sc.step(opt)\n        sc.update()\n    return scales, skipped\n"),
         ("the visible case's answer, whatever is asked",
          lambda: "def scale_schedule(grad_max, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,\n"
          "                   growth_interval=2000):\n"
          "    return [65536.0, 32768.0, 32768.0, 65536.0, 65536.0, 131072.0, 131072.0, 262144.0], [0]\n")],
    PM: [("dtlab.parity's own", lambda: "def predict_memory_per_rank(param_shapes, nranks, shard=('params', 'grads', 'optimizer'), optimizer='momentum'):\n"
          "    from dtlab.parity.fsdp import predict_memory\n    return predict_memory(param_shapes, nranks, shard, optimizer)\n")],
    TC: [("dtlab's NCCL log parser", lambda: "def transport_and_channels(log_text):\n"
          "    from dtlab import nccl_log\n    return nccl_log.transport_and_channels(log_text)\n"),
         ("a table of data/'s NCCL logs by hash, the wrong parser for the rest", lambda: LOG_TABLE())],
    BB: [("dtlab.bench's own busbw", lambda: "def bus_bandwidth(op, size_bytes, time_us, nranks):\n"
          "    from dtlab.bench import busbw\n    return busbw(op, size_bytes, time_us * 1e-6, nranks)\n")],
    REC: [("dtlab.tuning's own best", lambda: "def recommend(df, size, min_margin_pct=2.0):\n"
           "    from dtlab import tuning\n    return tuning.best(df)\n")],
    CL: [("dtlab's own diagnosis", lambda: "def classify(evidence_dir):\n"
          "    from dtlab.hang import diagnose\n    return diagnose(evidence_dir).failure_class\n"),
         ("the planted lines of kinds.py as a table, own rules for the rest",
          lambda: shortcut("07_classify_line_table.py")),
         ("keywords, exit codes and every dump's set of calls (fifth red team)",
          lambda: shortcut("07_classify_keywords.py"))],
    DG: [("dtlab's own diagnosis", lambda: "def diagnosis(evidence_dir):\n"
          "    from dtlab.hang.diagnose.pipeline import diagnose\n    d = diagnose(evidence_dir)\n"
          "    return {'failure_class': d.failure_class}\n"),
         ("the culprit as whoever called from an unusual line (fifth red team)",
          lambda: shortcut("07_diagnosis_site_only.py")),
         ("a rule read off the feedback's case names (fifth red team)",
          lambda: shortcut("07_diagnosis_mined.py"))],
    PMT: [("dtlab's own diagnosis and the capstone's sites", lambda: "def postmortem(evidence_dir):\n"
           "    from dtlab.capstone.hang import _sites\n    from dtlab.hang import diagnose\n"
           "    d = diagnose(evidence_dir)\n    return {'failure_class': d.failure_class}\n"),
          ("the planted lines as a table from line to bug", lambda: PLANTED_LINES_TABLE),
          ("the culprit's function as a table to the bug, no Flight Recorder",
           lambda: shortcut("08_postmortem_function_table.py"))],
}
