# Two commands on a fresh machine:
#   make train   set up .venv and train the default recipe (configs/reach_mlp_ppo.yaml)
#   make test    set up .venv and run the whole test suite (what CI runs)
#   make test-fast  the edit loop: everything but the slow end-to-end runs, the Ray and the LIBERO tests
#   make test-slow  the rest: the slow end-to-end runs, the Ray and the LIBERO tests, one at a time
#   (the quick tests run on TEST_JOBS=2 processes; PYTEST_ARGS="-n 0" runs them in one, for -x or pdb)
# Extra arguments: make train ARGS="runner.iterations=20 cluster.backend=ray"; make test PYTEST_ARGS="-k chunk"

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONSTRAINTS := .ci/constraints.txt
RECIPE ?= configs/reach_mlp_ppo.yaml
EXTRAS ?= test,robotics,metaworld,libero
export MUJOCO_GL ?= egl

.PHONY: setup train test test-fast test-slow bench clean

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	bash .ci/system-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from the local CPU wheel; the constraints file keeps it there afterwards. pip byte-compiles what it
	# installs, and must: Ray starts its workers with PYTHONDONTWRITEBYTECODE=1, so a module without its .pyc is
	# compiled again in every Ray worker that imports it (torch: seconds a process).
	$(PY) -m pip install -q torch==2.13.0
	# The simulator-suite extras are installed too, so their adapter tests really run.
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

train: setup
	$(VENV)/bin/embodied train $(RECIPE) $(ARGS)

# The whole suite in two parts: every test without Ray on TEST_JOBS processes (pytest-xdist, work-stealing: a slow
# end-to-end run there is mostly one busy thread), then the Ray tests one at a time in one process (Ray starts once
# for all of them, and its worker processes already keep both cores busy). A part that PYTEST_ARGS leaves empty
# (pytest's exit code 5) is not a failure.
QUICK := not slow and not ray and not libero
TEST_JOBS ?= 2
PYTEST := WANDB_MODE=disabled $(VENV)/bin/pytest

test: setup
	$(PYTEST) -n $(TEST_JOBS) --dist worksteal -m "not ray" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) -m "ray" $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-fast: setup
	$(PYTEST) -n $(TEST_JOBS) -m "$(QUICK)" $(PYTEST_ARGS)

test-slow: setup
	$(PYTEST) -m "not ($(QUICK))" $(PYTEST_ARGS)

# make bench: `embodied bench` (ARGS go to it, e.g. --quick), then VLA act()/raw/PPO-step throughput
# (VLA_ARGS go to it), e.g. make bench VLA_ARGS="--scale medium --device cuda --dtype bfloat16"
bench: setup
	$(VENV)/bin/embodied bench $(ARGS)
	$(PY) benchmarks/vla_throughput.py $(VLA_ARGS)

clean:
	rm -rf $(VENV) runs wandb .pytest_cache
