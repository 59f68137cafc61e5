"""The rows of a check-env run and their report: the runner of checks, the table and the ``--json`` list."""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal

from embodied.config import EnvConfig
from embodied.env_runtime.check_env.diagnosis import CheckFailed, crash_failure, known_failure

Severity = Literal["ok", "warning", "error"]
LOAD = "import, construct and reset"  # the row of every error that stops all checks
RenderCheck = Literal["check", "require", "skip"]  # require: videos are on, so no render() is an error


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    fix: str = ""
    severity: Severity = "ok"  # "warning" rows pass; "error" rows fail
    traceback: str = ""  # the env's own traceback of a crash (printed above the table)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail, "fix": self.fix,
                "severity": self.severity}


class Rows:
    """Runs checks in order, one row each; a stopping failure or a crash in the env ends the run."""

    def __init__(self, cfg: EnvConfig) -> None:
        self.cfg, self.target = cfg, None
        self.results: list[CheckResult] = []
        self.stopped = False

    def run(self, name: str, fn: Callable[[], Any], stop_on_crash: bool = True, record: bool = True) -> Any:
        """``fn()``'s value (a str is the row's detail); None when it failed or the run has stopped.

        A crash (an exception that is not a ``CheckFailed``) stops the run unless ``stop_on_crash`` is off;
        ``record=False`` adds a row only for a failure.
        """
        if self.stopped:
            return None
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = fn()
            # Gymnasium raises on contract breaks and warns on recommendations: show those, pass.
            notes = sorted({_plain(str(w.message)) for w in caught if issubclass(w.category, UserWarning)})
            detail = value if isinstance(value, str) else ""
            if record:
                self.results.append(CheckResult(name, True, "; ".join(filter(None, [detail, *notes]))))
            return value
        except CheckFailed as exc:
            severity: Severity = "warning" if exc.warning else "error"
            self.results.append(CheckResult(name, exc.warning, str(exc), exc.fix, severity, exc.tb))
            self.stopped = exc.stop
        except Exception as exc:  # noqa: BLE001 - a crash is a finding to report, not to raise
            known = known_failure(exc, self.cfg, self.target)
            if known is not None:
                self.results.append(CheckResult(name, False, str(known), known.fix, "error", known.tb))
                self.stopped = known.stop and stop_on_crash
            else:
                crash = crash_failure(exc, self.cfg, self.target)
                self.results.append(CheckResult(name, False, str(crash), crash.fix, "error", crash.tb))
                self.stopped = stop_on_crash
        return None


class Checks:
    """The checks of one kind of env, run in order by ``run_all``; envs they build close with ``stack``."""

    def __init__(self, rows: Rows, cfg: EnvConfig, target: Any, stack: ExitStack, *, seed: int, steps: int,
                 chunk: int, fast: bool, render: RenderCheck) -> None:
        self.rows, self.cfg, self.target, self.stack, self.seed = rows, cfg, target, stack, seed
        self.steps, self.chunk, self.fast, self.render_check = steps, chunk, fast, render

    def run_all(self) -> None:
        raise NotImplementedError


def _plain(text: str) -> str:
    """A warning without terminal colour codes and gymnasium's 'WARN:' prefix."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace("WARN: ", "").strip()


def format_table(env_id: str, results: list[CheckResult]) -> str:
    width = max(len(r.name) for r in results)
    label = {"ok": "PASS", "warning": "WARN", "error": "FAIL"}
    lines = [f"check-env {env_id}"]
    for r in results:
        lines.append(f"  {label[r.severity]}  {r.name:<{width}}  {r.detail}".rstrip())
        if r.severity != "ok":
            lines.append(f"        {'':<{width}}  fix: {r.fix}")
    failed = sum(r.severity == "error" for r in results)
    warned = sum(r.severity == "warning" for r in results)
    lines.append(f"{len(results) - failed} passed ({warned} with warnings), {failed} failed")
    return "\n".join(lines)


def print_table(env_id: str, results: list[CheckResult]) -> None:
    for r in results:
        if r.traceback:
            print(r.traceback)
    print(format_table(env_id, results))


def print_json(results: list[CheckResult]) -> None:
    """The rows as a JSON list of {name, passed, detail, fix, severity}; tracebacks go to stderr."""
    for r in results:
        if r.traceback:
            print(r.traceback, file=sys.stderr)
    print(json.dumps([r.to_json() for r in results], indent=2))
