"""Bounds a statement cannot raise: time, result size, memory.

`Bounds` is set on the object's own connection (`Engine.bounded`) around one
read, as engine settings: ClickHouse stops the query itself when it runs
past `seconds` (TIMEOUT_EXCEEDED), stops reading once its result holds
`result_rows` rows or `result_bytes` bytes (`result_overflow_mode =
'break'`: a partial answer, the work stopped), and refuses to grow past
`memory_bytes`. A statement cannot lift them: `SET` is not a read, and the
gate refuses a SETTINGS clause naming any of them (`reach`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The engine's defaults, put back after a bounded read.
RESET = (
    "max_execution_time = 0, max_result_rows = 0, max_result_bytes = 0, "
    "result_overflow_mode = 'throw', max_memory_usage = 0"
)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Limits of one read; 0 leaves that one unbounded."""

    seconds: float = 30.0
    result_rows: int = 0
    result_bytes: int = 0
    memory_bytes: int = 0

    def settings(self) -> str:
        """The `SET` list that applies these bounds."""
        return (
            f"max_execution_time = {float(self.seconds)!r}, "
            f"max_result_rows = {int(self.result_rows)}, "
            f"max_result_bytes = {int(self.result_bytes)}, "
            "result_overflow_mode = 'break', "
            f"max_memory_usage = {int(self.memory_bytes)}"
        )
