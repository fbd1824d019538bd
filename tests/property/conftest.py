from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts the CI log must show: sequences run, inputs fuzzed."""
    from tests.property import (
        test_gate_differential,
        test_hostile_input,
        test_interop_alternating,
        test_param_fits,
        test_pinning,
        test_stateful_faults,
    )

    for name, stats in (
        ("durable state machine", test_stateful_faults.STATS),
        ("hostile input", test_hostile_input.STATS),
        ("pinned values", test_pinning.STATS),
        ("gate vs engine", test_gate_differential.STATS),
        ("param fits", test_param_fits.STATS),
        ("alternating writers", test_interop_alternating.STATS),
    ):
        if any(stats.values()):
            line = ", ".join(f"{k}={v}" for k, v in sorted(stats.items()))
            terminalreporter.write_line(f"{name}: {line}")
