"""Cancel and delete from the run page and the API (docs/web.md; docs/design.md §12).

Page posts are checked like an answer's (size, CSRF token, login: ``Pages.operator_post``) and
must name the run of their address; API calls take a JSON body under the bearer token. The
work is ``tether.cancel`` and ``tether.delete``, off the event loop.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..control import CONFIRM_STATUSES, cancel, delete
from ..errors import CorruptRecordError, RunNotFoundError, RunStatusChangedError
from ._body import CANCEL, DELETE, read_body
from ._http import json_response, to_run_page
from ._service import ActionError, Service

if TYPE_CHECKING:
    from ._api import Api
    from ._pages import Pages

__all__ = ["api_cancel", "api_delete", "cancel_form", "delete_form"]


async def cancel_run(
    service: Service, execution_id: str, reason: str | None, by: str | None, via: str
) -> dict[str, Any]:
    """``tether.cancel`` of the run, as ``tether cancel --json`` prints it.

    Raises:
        ActionError: 404 no such run.
    """

    def act() -> dict[str, Any]:
        try:
            result = cancel(execution_id, reason=reason, by=by, store=service.store, via=via)
        except RunNotFoundError:
            raise ActionError(404, f"no run with execution_id {execution_id!r}") from None
        return asdict(result)

    return await service._off_loop(act)


async def delete_run(service: Service, execution_id: str, *, confirmed: bool) -> dict[str, Any]:
    """``tether.delete`` of the run, as ``tether runs delete --json`` prints it; a paused or
    running run needs ``confirmed``.

    Raises:
        ActionError: 404 no such run; 409 a paused or running run without ``confirmed``, or a
            run whose status changed meanwhile (nothing deleted).
    """

    def act() -> dict[str, Any]:
        status: str | None = None
        try:
            run = service.store.get_run(execution_id)
        except CorruptRecordError as exc:  # a damaged run can still be deleted, confirmed
            if not confirmed:
                raise ActionError(409, f"{exc.message}; confirm to delete it") from None
        else:
            if run is None:
                raise ActionError(404, f"no run with execution_id {execution_id!r}")
            status = run.status
            if status in CONFIRM_STATUSES and not confirmed:
                raise ActionError(409, f"run {execution_id} is {status}: confirm to delete it")
        try:
            result = delete(execution_id, store=service.store, only_if_status=status)
        except (RunNotFoundError, RunStatusChangedError) as exc:
            raise ActionError(409, str(exc)) from None
        return asdict(result)

    return await service._off_loop(act)


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


async def _posted(web: Pages, request: Request) -> tuple[Any, Any] | Response:
    """The checked form post for the run of the address (400 when written for another)."""
    execution_id = request.path_params["execution_id"]
    checked = await web.operator_post(request)
    if isinstance(checked, Response):
        return checked
    form, session = checked
    posted_id = _field(form, "execution_id")
    if posted_id and posted_id != execution_id:
        return await web.render_run(
            request,
            session,
            execution_id,
            error=f"This form is for run {posted_id!r}, not {execution_id!r}; nothing was "
            "changed. Reload the page and try again.",
            status_code=400,
        )
    return form, session


async def cancel_form(web: Pages, request: Request) -> Response:
    """``POST /runs/{id}/cancel`` with an optional ``reason``: cancel, back to the run."""
    execution_id = request.path_params["execution_id"]
    posted = await _posted(web, request)
    if isinstance(posted, Response):
        return posted
    form, session = posted
    try:
        await cancel_run(
            web.service, execution_id, _field(form, "reason") or None, session[0].user, "web"
        )
    except ActionError as exc:
        return await web.render_run(
            request, session, execution_id, error=exc.message, status_code=exc.status_code
        )
    return to_run_page(execution_id, "cancelled")


async def delete_form(web: Pages, request: Request) -> Response:
    """``POST /runs/{id}/delete`` (``confirm=yes`` for a paused or running run): delete, then
    the runs list."""
    execution_id = request.path_params["execution_id"]
    posted = await _posted(web, request)
    if isinstance(posted, Response):
        return posted
    form, session = posted
    try:
        await delete_run(web.service, execution_id, confirmed=_field(form, "confirm") == "yes")
    except ActionError as exc:
        return await web.render_run(
            request, session, execution_id, error=exc.message, status_code=exc.status_code
        )
    return RedirectResponse("/runs?notice=deleted", status_code=303)


async def api_cancel(api: Api, request: Request) -> Response:
    """``POST /api/runs/{id}/cancel`` with ``{"reason": str?, "by": str?}``."""
    denied, user = await api.user(request)
    if denied is not None:
        return denied
    try:
        body = await read_body(request, CANCEL)
        eid = request.path_params["execution_id"]
        by = user or body.get("by")
        return json_response(await cancel_run(api.service, eid, body.get("reason"), by, "api"))
    except ActionError as exc:
        return json_response({"error": exc.message}, exc.status_code)


async def api_delete(api: Api, request: Request) -> Response:
    """``POST /api/runs/{id}/delete`` with ``{"confirm": bool?}``."""
    denied, _ = await api.user(request)
    if denied is not None:
        return denied
    try:
        body = await read_body(request, DELETE)
        eid = request.path_params["execution_id"]
        confirmed = body.get("confirm", False)
        return json_response(await delete_run(api.service, eid, confirmed=confirmed))
    except ActionError as exc:
        return json_response({"error": exc.message}, exc.status_code)
