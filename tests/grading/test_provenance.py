"""The grader refuses a solution cell that is not the learner's own work -- the code of the
modules an exercise takes away, pasted (renamed, padded) or packed in -- and passes every
reference solution of the course (dtlab.course.provenance)."""

import ast
import base64
import glob
import os
import zlib

import nbformat
import pytest

from answers import code_of
from dtlab.course import provenance
from dtlab.course.provenance import borrowed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _exercises():
    """(notebook, exercise, reference solution, the modules its test takes away), read from the
    course's test cells: every course.answer(...) / course.Ranks(...) with without=."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        meta = [(c, c.metadata.get("nbgrader", {})) for c in nb.cells]
        sols = {m["grade_id"]: c.source for c, m in meta if m.get("solution")}
        for c, m in meta:
            if not m.get("grade"):
                continue
            tree = ast.parse(c.source)
            names = {}  # the cell's own tuples (VERDICT = ("dtlab.hang...", ...))
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    try:
                        names[node.targets[0].id] = ast.literal_eval(node.value)
                    except ValueError:
                        pass
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("answer", "Ranks")):
                    continue
                without = [names.get(k.value.id) if isinstance(k.value, ast.Name)
                           else ast.literal_eval(k.value) for k in node.keywords if k.arg == "without"]
                name = m["grade_id"].removesuffix("_tests")
                if node.func.attr == "answer" and node.args and isinstance(node.args[0], ast.Constant):
                    name = node.args[0].value
                ref = sols.get(name) or sols.get(m["grade_id"].removesuffix("_tests"))
                if without and ref:
                    out.append((os.path.basename(path)[:2], name, ref, tuple(without[0])))
    return out


EXERCISES = _exercises()


def test_every_graded_exercise_that_takes_modules_away_is_covered():
    assert len(EXERCISES) >= 20 and all(w for *_, w in EXERCISES), EXERCISES


@pytest.mark.parametrize("nb,name,reference,without", EXERCISES, ids=lambda v: v if isinstance(v, str) else "")
def test_the_reference_solution_is_its_own_work(nb, name, reference, without):
    assert borrowed(reference, without) is None


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node):
        node.id = "x_" + node.id
        return node

    def visit_arg(self, node):
        node.arg = "a_" + node.arg
        return node

    def visit_FunctionDef(self, node):
        node.name = "f_" + node.name
        self.generic_visit(node)
        return node


FIT = os.path.join(ROOT, "dtlab", "bench", "fit.py")
DIAGNOSE = os.path.join(ROOT, "dtlab", "hang", "diagnose", "failed.py")


def test_a_pasted_module_is_refused_and_named():
    why = borrowed(code_of(FIT) + "\n\ndef fit_alpha_beta(sizes, times_us):\n    return 1.0, 2.0\n",
                   ("dtlab.bench",))
    assert why and "bench/fit.py" in why and "takes away" in why


def test_renamed_and_padded_copies_are_refused():
    renamed = ast.unparse(_Rename().visit(ast.parse(code_of(DIAGNOSE))))
    assert borrowed(renamed, ("dtlab.hang",)), "renaming every name hides nothing"
    # as much code of one's own as copied: the copy still counts
    own = "\n".join(f"def helper_{i}(values, k={i}):\n    total = 0\n    for v in values:\n"
                    f"        if v > k:\n            total += v * {i} - k\n    return total\n"
                    for i in range(60))
    assert borrowed(own + "\n" + code_of(DIAGNOSE), ("dtlab.hang",))
    assert borrowed(own, ("dtlab.hang",)) is None  # the padding alone is the learner's


class _Wrap(ast.NodeTransformer):
    """Every loaded name and constant wrapped in a call of a pass-through function (ninth red
    team: no run of 12 tokens of the copy is the library's any more)."""

    def __init__(self, fn):
        self.fn = fn

    def _wrap(self, node):
        return ast.copy_location(ast.Call(ast.Name(self.fn, ast.Load()), [node], []), node)

    def visit_Name(self, node):
        return self._wrap(node) if isinstance(node.ctx, ast.Load) else node

    def visit_Constant(self, node):
        return self._wrap(node) if isinstance(node.value, (str, int, float)) else node

    def visit_JoinedStr(self, node):  # an f-string's parts stay as they are
        return node


IB = os.path.join(ROOT, "dtlab", "multinode", "ib.py")


@pytest.mark.parametrize("wrapper", ["def _i(x):\n    return x\n", "_i = lambda v: v\n"])
def test_a_copy_with_every_name_wrapped_in_a_pass_through_call_is_refused(wrapper, monkeypatch):
    tree = ast.fix_missing_locations(_Wrap("_i").visit(ast.parse(code_of(IB))))
    cell = wrapper + ast.unparse(tree) + (
        "\n\ndef ib_port_problems(text, rate):\n"
        "    return sorted([p['ca'], p['port']] for p in port_problems(ibstat(text), rate))\n")
    with monkeypatch.context() as m:   # the cell as written: the wrapping hides the copy
        m.setattr(provenance, "unwrapped", lambda source: None)
        assert borrowed(cell, ("dtlab.multinode",)) is None
    why = borrowed(cell, ("dtlab.multinode",))
    assert why and "multinode/ib.py" in why and "takes away" in why, why


def test_a_packed_copy_is_refused():
    blob = base64.b64encode(zlib.compress(open(FIT, "rb").read())).decode()
    cell = (f"import base64, zlib\n_B = {blob!r}\nexec(zlib.decompress(base64.b64decode(_B)))\n"
            "def fit_alpha_beta(sizes, times_us):\n    return fit(sizes, times_us)\n")
    why = borrowed(cell, ("dtlab.bench",))
    assert why and "bytes of information once compressed" in why
    assert provenance.payload(cell) > provenance.PAYLOAD_CHARS


DIAGNOSE_PKG = os.path.join(ROOT, "dtlab", "hang", "diagnose")


def _packed():
    src = b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(DIAGNOSE_PKG, "*.py"))))
    return zlib.compress(src, 9)


LOADER = "import zlib\nexec(zlib.decompress({expr}))\ndef classify(d):\n    return 'oom'\n"


@pytest.mark.parametrize("how", ["a number", "a list of small numbers", "names", "many short strings"])
def test_a_copy_packed_in_any_encoding_is_refused(how):
    """The red team's encodings (grading issue): the library as one huge integer literal, which
    no count of strings saw; and as names or small pieces, which no one token shows."""
    data = _packed()
    if how == "a number":
        cell = LOADER.format(expr=f"(0x{data.hex()}).to_bytes({len(data)}, 'big')")
    elif how == "a list of small numbers":
        cell = LOADER.format(expr=f"bytes({list(data)})")
    elif how == "names":  # one identifier per 20 bytes, decoded from the names themselves
        hexed = data.hex()
        names = [f"x{hexed[i:i + 40]}" for i in range(0, len(hexed), 40)]
        cell = "".join(f"{n} = 0\n" for n in names) + LOADER.format(
            expr="bytes.fromhex(''.join(k[1:] for k in dict(globals()) if k.startswith('x')))")
    else:
        hexed = data.hex()
        cell = LOADER.format(expr="bytes.fromhex(''.join([" + ", ".join(
            repr(hexed[i:i + 8]) for i in range(0, len(hexed), 8)) + "]))")
    why = borrowed(cell, ("dtlab.hang",))
    assert why and "bytes of information once compressed" in why, why


def test_the_information_bound_has_room_for_a_long_winded_answer():
    """Four times the longest reference solution's text, comments and all, with names of its
    own: still under the bound."""
    longest = max((ref for *_, ref, _ in EXERCISES), key=len)
    verbose = "\n".join(f"# step {i}: explain in plain words what the next lines do and why\n"
                        + longest.replace("def ", f"def v{i}_") for i in range(4))
    assert provenance.information(verbose) < provenance.INFO_BYTES


@pytest.mark.parametrize("tail", ['%time """', "%time '''", '!echo """'])
def test_a_cell_the_checks_cannot_read_is_not_waved_through(tail):
    """An unclosed string after a magic stopped the tokenizer, and the checks found nothing to
    refuse (third red team): magics are left out first, as the learner's process leaves them out,
    and what still does not read is refused."""
    assert "fit.py" in borrowed(code_of(FIT) + "\n" + tail + "\n", ("dtlab.bench",))
    assert borrowed("def f(x):\n    return x + 1\n" + tail + "\n", ("dtlab.bench",)) is None
    # what neither reads nor compiles is left to the build, which names the SyntaxError
    assert borrowed('def f(x):\n    return """x\n', ("dtlab.bench",)) is None
