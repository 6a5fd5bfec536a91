"""Strings that break code which builds SQL, paths or markup by concatenation."""

from __future__ import annotations

HOSTILE = {
    "quotes": 'o\'brien "quoted" `back`',
    "sql": "x'); DROP TABLE runs; --",
    "sql_pg": 'x"; DROP SCHEMA public CASCADE; --',
    "percent": "100% %s %(name)s %% {0} {t}",
    "nul": "before\x00after",
    "backslash": "C:\\path\\n\\x00 \\'",
    "unicode": "zaż\u00f3\u0142\u0107 \U0001f600 \u202e",
    "long": "L" * 10_000,
}


def hostile_ids() -> list[tuple[str, str]]:
    return list(HOSTILE.items())
