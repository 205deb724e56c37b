"""The student's JupyterLab: the course without nbgrader's instructor tools.

Installing nbgrader turns on, for every JupyterLab in the environment, the instructor's tools
(the Create Assignment sidebar, Formgrader, Course List, the Nbgrader menu) and the hub
student's Assignment List. The student lab hides them with Jupyter's own configuration, so they
stay installed and a plain ``jupyter lab`` (``make instructor-lab``) still has all of them:

* a config directory that only this launch reads, first on ``JUPYTER_CONFIG_PATH`` (so it wins
  over the environment's own config), holding
  ``labconfig/page_config.json`` -- ``disabledExtensions``, what ``jupyter labextension disable``
  writes: the frontend plugins are never activated -- and
  ``jupyter_server_config.d/dtlab-student.json`` -- ``jpserver_extensions`` set to false, what
  ``jupyter server extension disable`` writes: their server endpoints are not even loaded.

The notebooks cite files of the course repository (``data/...`` and its provenance READMEs,
``BENCHMARKS.md``, ``scripts/``, the library's source in ``dtlab/``); the lab's folder gets a link
to each (:func:`link_course_files`), so the file browser opens them where the text says.

Students keep ``validate-assignment``: the Validate button runs the notebook and its visible
tests the way the grader will, which is how nbgrader students check their work before handing
it in. The Assignment List is hidden too: it fetches and submits through an nbgrader exchange on a
shared JupyterHub, which a self-paced ``make lab`` does not have (this course collects
submissions as files: grading/README.md); on a hub, the hub's own config decides.

    cd release && python -m dtlab.course.lab [jupyter lab options]    # what `make lab` runs
    JUPYTER_CONFIG_PATH=$(python -m dtlab.course.lab --config-dir) jupyter labextension list
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

# Plugin ids from nbgrader's labextension (share/jupyter/labextensions/@jupyter/nbgrader).
HIDDEN_PLUGINS = (
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
    "@jupyter/nbgrader:menu",
)
KEPT_PLUGINS = ("@jupyter/nbgrader:validate-assignment",)
OFF_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
)


def default_config_dir() -> str:
    """Inside the environment dtlab is installed in (``.venv`` for ``make lab``)."""
    return os.path.join(sys.prefix, "etc", "dtlab", "student-jupyter")


def write_config(path: str | None = None) -> str:
    """Write the student config directory (idempotent); returns its path."""
    path = path or default_config_dir()
    try:
        _write(path)
    except OSError:  # an environment we may not write to: a private temp dir instead
        path = os.path.join(tempfile.gettempdir(), f"dtlab-student-jupyter-{os.getuid()}")
        _write(path)
    return path


def _write(path: str) -> None:
    files = {
        os.path.join("labconfig", "page_config.json"):
            {"disabledExtensions": {name: True for name in HIDDEN_PLUGINS}},
        os.path.join("jupyter_server_config.d", "dtlab-student.json"):
            {"ServerApp": {"jpserver_extensions": {name: False for name in OFF_SERVER_EXTENSIONS}}},
    }
    for rel, data in files.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
        tmp = f"{full}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, full)


def student_env(config_dir: str, env: dict | None = None) -> dict:
    """``env`` (default: this process's) with the student config first on JUPYTER_CONFIG_PATH."""
    env = dict(os.environ if env is None else env)
    rest = env.get("JUPYTER_CONFIG_PATH")
    env["JUPYTER_CONFIG_PATH"] = config_dir + (os.pathsep + rest if rest else "")
    return env


COURSE_FILES = ("data", "BENCHMARKS.md", "README.md", "scripts", "dtlab")


def link_course_files(dest: str = ".", repo: str | None = None) -> list[str]:
    """A symbolic link in ``dest`` to each of :data:`COURSE_FILES` of the repository that exists
    there and is not already in ``dest`` (a file or folder of that name is left alone); returns
    the names linked. Jupyter's file browser follows them."""
    from .layout import REPO

    repo = repo or REPO
    made = []
    for name in COURSE_FILES:
        target, link = os.path.join(repo, name), os.path.join(dest, name)
        if os.path.exists(target) and not os.path.lexists(link):
            os.symlink(target, link)
            made.append(name)
    return made


def main(argv: list[str] | None = None) -> None:
    """Replace this process by ``jupyter lab ARGV`` with the student config, in a folder that
    links the course files the notebooks cite."""
    argv = list(sys.argv[1:] if argv is None else argv)
    config_dir = write_config()
    if argv == ["--config-dir"]:
        print(config_dir)
        return
    link_course_files()
    os.execve(sys.executable, [sys.executable, "-m", "jupyterlab", *argv], student_env(config_dir))


if __name__ == "__main__":
    main()
