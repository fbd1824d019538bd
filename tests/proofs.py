"""What the proofs covered, printed at the end of every run.

The property tests count what they ran (state-machine steps, hostile
inputs, pinned values, ...) in a module-level `STATS`. Each test's increase
rides on its teardown report, so the totals are right whether the tests ran
in this process or on pytest-xdist workers. Every hypothesis test's budget
(its `max_examples`, and steps for a state machine) is printed beside them:
a fixed budget per test, not "until time runs out".
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import settings

#: (what the line says, the module whose STATS it reports)
COUNTED = (
    ("durable state machine", "tests.property.test_stateful_faults"),
    ("many objects state machine", "tests.property.test_multi_state_machine"),
    ("hostile input", "tests.property.test_hostile_input"),
    ("pinned values", "tests.property.test_pinning"),
    ("gate vs engine", "tests.property.test_gate_differential"),
    ("param fits", "tests.property.test_param_fits"),
    ("alternating writers", "tests.property.test_interop_alternating"),
    ("serial transactions", "tests.property.test_transactions"),
)

_seen: dict[str, dict[str, int]] = {}
_totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
_budgets: dict[str, str] = {}


def _increase() -> dict[str, dict[str, int]]:
    """How much each counted STATS grew since the last call, in this process."""
    grown: dict[str, dict[str, int]] = {}
    for name, module in COUNTED:
        stats = getattr(sys.modules.get(module), "STATS", None)
        if not stats:
            continue
        before = _seen.setdefault(name, {})
        delta = {k: v - before.get(k, 0) for k, v in stats.items() if v != before.get(k, 0)}
        if delta:
            grown[name] = delta
            before.update(stats)
    return grown


def _budget(item: pytest.Item) -> str | None:
    found = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
    if not isinstance(found, settings):
        found = getattr(getattr(item, "cls", None), "settings", None)
    if not isinstance(found, settings):
        return None
    if getattr(getattr(item, "cls", None), "settings", None) is found:
        return f"{found.max_examples} sequences x {found.stateful_step_count} steps"
    return f"{found.max_examples} examples"


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    budget = _budget(item)
    if budget is not None:
        item.user_properties.append(("hypothesis_budget", budget))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    grown = _increase()
    if grown:
        item.user_properties.append(("proof_counts", grown))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Runs where the results are gathered: here, or on the xdist controller."""
    for key, value in report.user_properties:
        if key == "hypothesis_budget":
            # one line per test function, not per parameter
            _budgets[re.sub(r"\[.*\]$", "", report.nodeid)] = str(value)
        elif key == "proof_counts" and report.when == "teardown":
            grown: dict[str, Any] = value
            for name, delta in grown.items():
                for k, v in delta.items():
                    _totals[name][k] += int(v)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts the CI log must show: sequences run, inputs fuzzed, budgets."""
    for name, _ in COUNTED:
        stats = _totals.get(name)
        if stats and any(stats.values()):
            line = ", ".join(f"{k}={v}" for k, v in sorted(stats.items()))
            terminalreporter.write_line(f"{name}: {line}")
    if _budgets:
        profile = settings.get_current_profile_name()
        terminalreporter.write_line(f"hypothesis budgets (profile {profile}), per test:")
        for nodeid, budget in sorted(_budgets.items()):
            terminalreporter.write_line(f"  {nodeid}: {budget}")
