# dtlab -- two commands on a fresh machine:
#   make lab    install into .venv (created or reused) and open the course in JupyterLab
#   make test   install into .venv and run the whole test suite
# (instructors: `make instructor-lab`, and grading/README.md)
#
# torch: with NVIDIA GPUs (nvidia-smi works) pip installs a CUDA build; without, the pinned CPU
# build. Override with TORCH_SPEC=... and/or TORCH_INDEX=<index url> (for instance
# TORCH_INDEX=https://download.pytorch.org/whl/cpu on a laptop without GPUs).

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
# PY=python3 make hang (or make hang PY=python3): run with an interpreter that already has
# everything installed, skipping the venv (nothing is installed or downloaded). Only `hang`
# reads PY; install, lab and test always use the venv.
PY ?= $(VPY)
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_SPEC ?= $(if $(HAS_GPU),torch>=2.6,torch==2.13.0)
TORCH_INDEX ?=
LAB_ARGS ?=
PYTEST_ARGS ?=
# make test runs the suite in TEST_JOBS pytest-xdist workers (0: in one process). Part of it
# waits on ranks, kernels and graders rather than computing: on 2 cores two workers took 12.2 min
# from a clean clone (2026-11-28; the install before it 1.6 min). Each worker has a temp dir of
# its own (tests/conftest.py).
TEST_JOBS ?= 2
STAMP := $(VENV)/.dtlab-installed

ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab instructor-lab test quick install bench doctor hang clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "dtlab needs Python >= 3.10; run: make PYTHON=python3.11 ...")'
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	@$(VPY) -c 'import torch' 2>/dev/null || \
	  $(VPY) -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VPY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

# JupyterLab on the student version of the course, in release/ (gitignored): the notebooks without
# solutions or hidden tests. A notebook already in release/ is never overwritten -- it holds your
# work; delete it (or run `dtlab course release --out release --force`) for a fresh copy.
# The student lab hides nbgrader's instructor tools (dtlab/course/lab.py says how). JupyterLab
# listens on port 8888 (the next free one if taken); LAB_ARGS="--no-browser --port=8890" etc.
lab: $(STAMP)
	$(VENV)/bin/dtlab course release --out release
	cd release && $(abspath $(VPY)) -m dtlab.course.lab $(ALLOW_ROOT) $(LAB_ARGS)

# Plain JupyterLab on the repository, every nbgrader tool shown (Create Assignment, Formgrader...).
instructor-lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(ALLOW_ROOT) $(LAB_ARGS)

test: $(STAMP)
	$(VPY) -m pytest -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

# The quick loop while developing: the suite without the tests marked slow (notebook runs,
# grading end to end, hang reproductions, the browser, launches that wait out a timeout or a
# kill). On 2 cores 1-2 min where make test takes 12.5 or more (2026-11-27); make test before a push.
quick: $(STAMP)
	$(VPY) -m pytest -m "not slow" -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

bench: $(STAMP)
	$(VPY) benchmarks/launch.py

doctor: $(STAMP)
	$(VENV)/bin/dtlab doctor

# The capstone's training job broken for a real reason, its evidence collected, the diagnosis
# printed (dtlab capstone hang; HANG_ARGS="--bug stuck_loader --nprocs 3" etc.). The venv is
# installed first only when PY is the venv's.
HANG_ARGS ?=
hang: $(if $(filter $(VPY),$(PY)),$(STAMP))
	$(PY) -m dtlab capstone hang $(HANG_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
