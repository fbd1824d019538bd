from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.property.test_stateful_faults import STATS

    if STATS["sequences"]:
        terminalreporter.write_line(
            "durable state machine: " + ", ".join(f"{k}={v}" for k, v in sorted(STATS.items()))
        )
