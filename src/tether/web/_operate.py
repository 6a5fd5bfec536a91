"""The run inspector's buttons: resume a failed or stranded run, fork from a checkpoint with
edited state (docs/web.md, "The run inspector"). Form posts, checked like an answer's (size,
CSRF token, login); the work is :class:`~tether.web._service.Service`'s."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ..serde import parse_json_text
from ._http import to_run_page
from ._service import ActionError

if TYPE_CHECKING:
    from ._pages import Pages

__all__ = ["fork_form", "resume_form"]


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


async def resume_form(web: Pages, request: Request) -> Response:
    """``POST /runs/{id}/resume``: resume the run through this server's runner; back to the
    run's page, or the page with the refusal (409: no runner here, it waits for an answer,
    it completed)."""
    execution_id = request.path_params["execution_id"]
    checked = await web.operator_post(request)
    if isinstance(checked, Response):
        return checked
    _, session = checked
    try:
        await web.service.resume(execution_id)
    except ActionError as exc:
        return await web.render_run(
            request, session, execution_id, error=exc.message, status_code=exc.status_code
        )
    return to_run_page(execution_id, "run_resumed")


async def fork_form(web: Pages, request: Request) -> Response:
    """``POST /runs/{id}/fork`` with ``checkpoint_id`` and ``state`` (a JSON object merged
    into the state there; empty for none): branch and run a new run, then show it."""
    execution_id = request.path_params["execution_id"]
    checked = await web.operator_post(request)
    if isinstance(checked, Response):
        return checked
    form, session = checked
    checkpoint_id = _field(form, "checkpoint_id") or None
    text = _field(form, "state")
    try:
        updates = parse_json_text(text) if text else None
        if updates is not None and not isinstance(updates, dict):
            raise ActionError(
                400, 'The state to merge must be a JSON object, e.g. {"amount": 400}.'
            )
        outcome = await web.service.fork(execution_id, checkpoint_id, updates)
    except json.JSONDecodeError as exc:
        error, status = f"The state is not valid JSON ({exc.msg} at position {exc.pos}).", 400
    except ActionError as exc:
        error, status = exc.message, exc.status_code
    else:
        return to_run_page(outcome["execution_id"], "forked")
    return await web.render_run(
        request,
        session,
        execution_id,
        error=error,
        status_code=status,
        checkpoint_id=checkpoint_id,
    )
