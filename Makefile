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
EXTRAS ?= test,robotics,metaworld,libero,maniskill
export MUJOCO_GL ?= egl

.PHONY: setup train test test-fast test-slow bench clean

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	bash .ci/system-deps.sh
	# ManiSkill's renderer needs Vulkan: a private CPU driver under .vulkan/, the system's Mesa untouched.
	bash .ci/vulkan-driver.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from the local CPU wheel; the constraints file keeps it there afterwards.
	$(PY) -m pip install -q --no-compile torch==2.13.0
	# The simulator-suite extras are installed too, so their adapter tests really run.
	$(PY) -m pip install -q --no-compile -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	# Then every installed module is byte-compiled, on all cores (pip does it one file at a time: ~90 s here, against
	# ~60 s on two cores). It must be done: Ray starts its workers with PYTHONDONTWRITEBYTECODE=1, so a module
	# without its .pyc is compiled again in every Ray worker that imports it (torch: seconds a process). A third-party
	# file that is not Python 3 (pip skips those as well) does not stop the set-up.
	$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	touch $@

setup: $(VENV)/.installed

train: setup
	$(VENV)/bin/embodied train $(RECIPE) $(ARGS)

# The whole suite in two parts. First every test without Ray or LIBERO on TEST_JOBS processes (pytest-xdist,
# work-stealing: a slow end-to-end run there is mostly one busy thread). Then the Ray tests one at a time in one
# process (Ray starts once for all of them, and its worker processes keep both cores busy), and beside them the LIBERO
# tests in a second process at the idle scheduling class (chrt -i 0; nice 19 where that is refused): the Ray tests
# leave about a sixth of the CPU idle (timeouts waited out, processes starting), which the LIBERO tests take without
# slowing them. Their output follows the Ray tests'. A part that PYTEST_ARGS leaves empty (pytest's exit code 5) is
# not a failure.
QUICK := not slow and not ray and not libero
TEST_JOBS ?= 2
# One torch (OpenMP) thread a test process: the processes already fill the cores, and two threads each made the
# policy tests spend a fifth more CPU (their threads spinning while waiting on each other) for no gain in wall time.
PYTEST := env WANDB_MODE=disabled OMP_NUM_THREADS=1 $(VENV)/bin/pytest
IDLE := $(shell chrt -i 0 true >/dev/null 2>&1 && echo chrt -i 0 || echo nice -n 19)
passed = { [ $(1) -eq 0 ] || [ $(1) -eq 5 ]; }

test: setup
	$(PYTEST) -n $(TEST_JOBS) --dist worksteal -m "not ray and not libero" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	@echo "$(PYTEST) -m ray; beside it: $(IDLE) $(PYTEST) -m 'libero and not ray'"
	@log=$$(mktemp); $(IDLE) $(PYTEST) -m "libero and not ray" $(PYTEST_ARGS) > $$log 2>&1 & beside=$$!; \
	trap 'kill $$beside 2>/dev/null' INT TERM; \
	$(PYTEST) -m "ray" $(PYTEST_ARGS); ray=$$?; wait $$beside; libero=$$?; \
	echo "== the LIBERO tests, run beside the Ray tests:"; cat $$log; rm -f $$log; \
	$(call passed,$$ray) && $(call passed,$$libero)

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
