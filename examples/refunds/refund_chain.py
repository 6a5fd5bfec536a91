"""A refund-approval chain: validate -> score risk -> (human review) -> charge -> notify.

Charges go through an ``@idempotent`` function that appends to a ledger file, so a refund is
paid once even when its step is re-entered after a crash or a human's answer.
"""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from tether import (
    Chain,
    Checkpointer,
    current_execution_id,
    current_idempotency_key,
    idempotent,
    interrupt,
)
from tether.registry import Registry

REVIEW_OVER = Decimal("500")  # refunds above this need a manager
LEDGER = Path(os.environ.get("REFUND_LEDGER", "ledger.jsonl"))


@idempotent
def pay_refund(request_id: str, customer_id: str, amount: Decimal, currency: str) -> dict[str, Any]:
    """The side effect: one ledger line per refund paid (think: a payment provider call)."""
    entry = {
        "execution_id": current_execution_id(),
        "request_id": request_id,
        "customer_id": customer_id,
        "amount": str(amount),
        "currency": currency,
        # what you would pass as the provider's Idempotency-Key header
        "idempotency_key": current_idempotency_key(),
    }
    with LEDGER.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return {"paid": str(amount), "currency": currency}


def validate(s: dict[str, Any]) -> dict[str, Any]:
    problems = []
    if s["amount"] <= 0:
        problems.append("amount must be positive")
    if "@" not in s["customer_email"]:
        problems.append("bad email")
    return {"valid": not problems, "problems": problems}


def score_risk(s: dict[str, Any]) -> dict[str, Any]:
    score = 0.0
    score += min(float(s["amount"]) / 2000, 1.0) * 0.5
    score += 0.3 if s["account_age_days"] < 30 else 0.0
    score += min(s["prior_refunds"], 4) * 0.05
    return {"risk": round(score, 2)}


def review(s: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt(
        "manager_approval",
        {
            "request_id": s["request_id"],
            "amount": str(s["amount"]),
            "currency": s["currency"],
            "risk": s["risk"],
            "reason": s["reason"],
        },
    )
    return {"approved": answer.approved, "reviewer": answer.metadata.get("reviewer")}


def charge(s: dict[str, Any]) -> dict[str, Any]:
    receipt = pay_refund(s["request_id"], s["customer_id"], s["amount"], s["currency"])
    return {"receipt": receipt}


def notify(s: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.02)  # sending the email
    outcome = "refunded" if s.get("receipt") else "declined"
    return {"outcome": outcome, "notified": s["customer_email"]}


def build(store: Checkpointer | None) -> Chain:
    """The refund chain over ``store`` (``None``: ``tether.connect()`` on first use, which
    reaches the store a command's ``--db`` names)."""
    chain = Chain("refunds", store)
    for node_id, fn in [
        ("validate", validate),
        ("score_risk", score_risk),
        ("review", review),
        ("charge", charge),
        ("notify", notify),
    ]:
        chain.add_node(node_id, fn)
    chain.add_edge("validate", "score_risk", condition=lambda s: s["valid"])
    chain.add_edge("validate", "notify")
    chain.add_edge("score_risk", "review", condition=lambda s: s["amount"] > REVIEW_OVER)
    chain.add_edge("score_risk", "charge")
    chain.add_edge("review", "charge", condition=lambda s: s["approved"])
    chain.add_edge("review", "notify")
    chain.add_edge("charge", "notify")
    return chain


def load_requests(path: Path) -> list[dict[str, Any]]:
    import csv

    with path.open(newline="", encoding="utf-8") as f:
        return [
            {
                **row,
                "amount": Decimal(row["amount"]),
                "account_age_days": int(row["account_age_days"]),
                "prior_refunds": int(row["prior_refunds"]),
            }
            for row in csv.DictReader(f)
        ]


#: The runners the command line and the web page resume: ``--app refund_chain:app``.
app = Registry(build(None))
