"""Repetition statistics, targets and the markdown tables.

A :class:`Metric` is one measured quantity with its repetitions; the table shows the median,
the min-max range, the target and whether the median meets it. Nothing is rounded before the
comparison: the ✓/✗ is decided on the raw median.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

QUICK = os.environ.get("TETHER_BENCH_QUICK") == "1"
REPS = 3 if QUICK else 7


@dataclass(frozen=True, slots=True)
class Target:
    """A bound a median must meet, e.g. ``Target("<=", 1.3)``."""

    op: str
    bound: float

    def met(self, value: float) -> bool:
        checks: dict[str, Callable[[float, float], bool]] = {
            "<=": lambda v, b: v <= b,
            "<": lambda v, b: v < b,
            ">=": lambda v, b: v >= b,
        }
        return checks[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.op.replace('<=', '≤').replace('>=', '≥')} {_num(self.bound)}"


@dataclass(slots=True)
class Metric:
    """One row: a name, a unit, the value of each repetition and an optional target."""

    name: str
    unit: str
    values: list[float]
    target: Target | None = None
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "✓" if self.target.met(self.median) else "✗"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "values": self.values,
            "median": self.median,
            "target": str(self.target) if self.target else None,
            "met": None if self.target is None else self.target.met(self.median),
            "note": self.note,
        }


@dataclass(slots=True)
class Section:
    """One workload on one backend: its metrics, or the reason it was skipped."""

    workload: str
    backend: str
    metrics: list[Metric] = field(default_factory=list)
    skipped: str | None = None

    def add(
        self,
        name: str,
        unit: str,
        values: list[float],
        target: Target | None = None,
        note: str = "",
    ) -> Metric:
        m = Metric(name, unit, list(values), target, note)
        self.metrics.append(m)
        return m


def ratios(num: list[float], den: list[float]) -> list[float]:
    """Per-repetition ratios of paired measurements."""
    return [a / b if b else float("inf") for a, b in zip(num, den, strict=True)]


def _num(v: float) -> str:
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e6:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _cell(text: str) -> str:
    """``text`` as one markdown table cell: on one line, its pipes escaped (a driver's error
    message can hold both)."""
    return " ".join(text.split()).replace("|", "\\|")


def render(title: str, sections: list[Section]) -> str:
    """A markdown table for one workload across backends."""
    lines = [
        f"### {title}",
        "",
        "| backend | metric | unit | median | min-max | n | target | met |",
        "|---|---|---|---:|---|---:|---|:---:|",
    ]
    notes: list[str] = []
    for s in sections:
        if s.skipped is not None:
            lines.append(f"| {s.backend} | skipped: {_cell(s.skipped)} | | | | | | |")
            continue
        for m in s.metrics:
            rng = f"{_num(min(m.values))}-{_num(max(m.values))}" if len(m.values) > 1 else ""
            name = m.name
            if m.note:
                if m.note not in notes:
                    notes.append(m.note)
                name += f" [{notes.index(m.note) + 1}]"
            lines.append(
                f"| {s.backend} | {name} | {m.unit} | {_num(m.median)} | {rng} | "
                f"{len(m.values)} | {m.target or ''} | {m.verdict} |"
            )
    if notes:
        lines.append("")
        lines.extend(f"[{i}] {n}" for i, n in enumerate(notes, 1))
    lines.append("")
    return "\n".join(lines)
