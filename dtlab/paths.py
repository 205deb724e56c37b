"""Paths a user names, checked before anything runs: a file to read, a file or folder to write.

A name on a command line can be anything: a FIFO (reading it waits for a writer forever),
``/dev/zero`` (it never ends), a 3 GB file (all of it in memory), a folder, a file this user
may not read, a name that is not UTF-8. So every reader of a path a person names reads it
through :func:`read_bytes` (or checks it with :func:`check_readable` where it streams), and
every command checks its output paths with :func:`check_output_file` /
:func:`check_output_folder` *before* it measures anything: a typo in ``--csv`` costs one line,
not a sweep. Each refusal is one ValueError (:class:`NoSuchFile`, also a FileNotFoundError,
when the path is not there) naming the path, what is wrong and what to do -- ``dtlab CMD: ...``
and exit status 2 at the terminal (dtlab/cli.py).

A leaf, like :mod:`dtlab.vocab`: it imports nothing from dtlab.

>>> read_regular("/dev/zero")
(None, 'a character device, not a regular file')
>>> try:
...     check_readable("/nonexistent.log", "give the log file")
... except ValueError as e:
...     print(e)
/nonexistent.log: no such file: give the log file
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

MAX_BYTES = 64 << 20  # per file: a larger one is not a log, dump or table a person meant to give


class NoSuchFile(FileNotFoundError, ValueError):
    """The path is not there: a FileNotFoundError, and a ValueError like every other refusal
    here (so ``except ValueError`` around a reader catches all of them)."""


def shown(path) -> str:
    """The path as text that prints anywhere: a byte that is not UTF-8 as ``\\xff`` (what
    ``ls -b`` shows), not a lone surrogate that a strict stream cannot encode."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def label(path, name: str | None = None) -> str:
    """The path as a message names it: ``csv='x.csv'`` for a parameter, ``--csv 'x.csv'`` for
    a flag, ``x.csv`` for neither (:func:`shown`, quoted as is: repr() would double ``\\``)."""
    if not name:
        return shown(path) or "''"
    return f"{name} '{shown(path)}'" if name.startswith("-") else f"{name}='{shown(path)}'"


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "something else"


def _open_regular(path, limit: int, follow: bool) -> tuple[int | None, str]:
    """(fd, "") of a regular file of at most ``limit`` bytes, opened for reading, else
    (None, why not). Nothing else is opened (a device may act on open); O_NONBLOCK so that
    a FIFO swapped in meanwhile cannot make the open wait, and fstat on what was opened: what
    is read is what was checked. Without ``follow``, a symlink is refused, never opened."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{_kind(st.st_mode)}, not a regular file"
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                     | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        return None, "no such file"
    except OSError as e:
        return None, f"cannot open it ({e.strerror or type(e).__name__})"
    except ValueError:  # from Python, never from a command line
        return None, "a name with a NUL byte in it"
    st = os.fstat(fd)
    why = "" if stat.S_ISREG(st.st_mode) else f"{_kind(st.st_mode)}, not a regular file"
    if not why and st.st_size > limit:
        why = f"larger than {limit >> 20} MiB ({st.st_size >> 20} MiB): not read"
    if why:
        os.close(fd)
        return None, why
    return fd, ""


def read_regular(path, limit: int = MAX_BYTES, follow: bool = False) -> tuple[bytes | None, str]:
    """(contents, "") of a regular file of at most ``limit`` bytes, else (None, why not): the
    failure as data, for a reader going through a folder it did not write (dtlab diagnose).
    A symlink is refused unless ``follow`` (one in a folder could point at /dev/zero)."""
    fd, why = _open_regular(path, limit, follow)
    if fd is None:
        return None, why
    try:
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > limit:  # it grew while being read, or /proc says 0 bytes and is not
            return None, f"larger than {limit >> 20} MiB: not read"
        return b"".join(chunks), ""
    except OSError as e:
        return None, f"cannot read it ({e.strerror or type(e).__name__})"
    finally:
        os.close(fd)


def _refuse(path, why: str, hint: str, name: str | None, error: type[ValueError]):
    msg = f"{label(path, name)}: {why}: {hint}"
    return NoSuchFile(msg) if why == "no such file" else error(msg)


def read_bytes(path, hint: str, limit: int = MAX_BYTES, name: str | None = None,
               error: type[ValueError] = ValueError) -> bytes:
    """The contents of the file a person named (symlinks followed); for anything else
    ``error`` (a ValueError) or :class:`NoSuchFile`: ``"PATH: what is wrong: hint"``."""
    raw, why = read_regular(path, limit, follow=True)
    if raw is None:
        raise _refuse(path, why, hint, name, error)
    return raw


def unreadable(path, limit: int = MAX_BYTES) -> str:
    """Why :func:`read_bytes` would refuse ``path`` ("" if it would not): opened, checked and
    closed, nothing read -- for a reader that streams the file itself."""
    fd, why = _open_regular(path, limit, follow=True)
    if fd is not None:
        os.close(fd)
    return why


def check_readable(path, hint: str, limit: int = MAX_BYTES, name: str | None = None,
                   error: type[ValueError] = ValueError) -> None:
    """:func:`unreadable` as :func:`read_bytes` raises it."""
    why = unreadable(path, limit)
    if why:
        raise _refuse(path, why, hint, name, error)


def text_or_file(text_or_path, hint: str) -> tuple[str, str]:
    """(text, name) from what a reader of tool output was given: a path (``os.PathLike``, or a
    string of one line shorter than 4096 characters) is read with :func:`read_bytes` and decoded
    with replacement characters; any other string is the text itself, named ``"<text>"``."""
    one_line = isinstance(text_or_path, str) and "\n" not in text_or_path
    if isinstance(text_or_path, os.PathLike) or (one_line and len(text_or_path) < 4096):
        path = os.fspath(text_or_path)
        return read_bytes(path, hint).decode("utf-8", errors="replace"), path
    if not isinstance(text_or_path, str):
        raise ValueError(f"expected text or a path, not {type(text_or_path).__name__}: {hint}")
    return text_or_path, "<text>"


def _writable_folder(folder: str) -> str:
    """"" if a new entry can be made in ``folder``, else why not (made and removed again: only
    trying knows a read-only mount or /proc; access() says yes to root everywhere)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dtlab-check-", dir=folder))
        return ""
    except OSError as e:
        return e.strerror or type(e).__name__


def _existing_ancestor(path: str) -> str:
    here = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(here):
        here = os.path.dirname(here)
    return here


_HELD: list[int] = []  # write ends of output FIFOs, open until exit (check_output_file)


def check_output_file(path, name: str | None = None) -> None:
    """A file this process can create or overwrite, checked before anything is measured.
    Refused: a folder, a path under a missing folder or under a file, a place it cannot write.
    An existing FIFO or device is fine (``--csv /dev/stdout``, ``>(gzip > out.gz)``), but a
    FIFO needs a reader now: writing to one with none would block for ever, after the whole
    measurement. The end opened to find out stays open until this process exits, so a reader
    that sees its last writer go (``cat FIFO``) does not leave before the real write."""
    named = label(path, name)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{named} is a folder: give the path of a file (in it, or elsewhere)")
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.lexists(folder) else "does not exist"
        raise ValueError(f"{named}: its folder {shown(folder)} {what}: make the folder first "
                         f"(mkdir -p) or give another path")
    if os.path.exists(path):
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode):
            try:
                _HELD.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno == errno.ENXIO:
                    raise ValueError(f"{named} is a FIFO that nothing reads: start its reader "
                                     f"first, or give a regular file") from None
                raise ValueError(f"{named}: cannot write it ({e.strerror}): give another "
                                 f"path") from None
            return
        if not stat.S_ISREG(mode):
            return
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
            return
        except OSError as e:
            why = e.strerror or type(e).__name__
    else:
        why = _writable_folder(folder)
        if not why:
            return
    raise ValueError(f"{named}: cannot write it ({why}): give a path in a folder you can write")


def check_output_folder(path, name: str | None = None, empty: bool = False,
                        so: str = "") -> None:
    """A folder to write into, made later if it is not there, checked before anything runs.
    ``empty``: an existing one must hold nothing (``so`` says why, e.g. "evidence from two runs
    never mixes")."""
    named = label(path, name)
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{named} exists and is not a folder: give a new folder"
                             + (f", so {so}" if so else ""))
        if empty and os.listdir(path):
            raise ValueError(f"{named} exists and is not an empty folder: give a new or empty "
                             f"folder" + (f", so {so}" if so else ""))
        where = path
    else:
        where = _existing_ancestor(path)
        if not os.path.isdir(where):
            raise ValueError(f"{named}: {shown(where)} is a file, not a folder: give a path "
                             f"in a folder")
    why = _writable_folder(where)
    if why:
        raise ValueError(f"{named}: cannot write in {shown(where)} ({why}): give a folder you "
                         f"can write")
