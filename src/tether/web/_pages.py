"""The server-rendered pages: templates, sessions and login, the listings, a run's page and
its answer form (the routes are assembled in ``_app``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..errors import StoreError, StoreUnavailableError
from ..serde import parse_json_text
from ..views import RUN_STATUSES, compact, to_json, when
from ._auth import CSRF_FIELD, SESSION_COOKIE, SESSION_MAX_AGE_SECONDS, Session, Sessions
from ._http import (
    authenticate,
    capped_body,
    client_address,
    json_response,
    to_run_page,
    too_many,
)
from ._inbox import (
    WAITING_CHOICES,
    Inbox,
    Listing,
    age,
    limit_of,
    pending_query,
    runs_query,
    sort_params,
    summary,
)
from ._paths import run_page_url, run_url
from ._service import ActionError, Answer, Service
from ._users import Throttle

__all__ = ["Pages"]


NOTICES = {
    "resumed": "Answer given; the run resumed through its runner.",
    "stored": "Answer stored. No runner of this name is in the server's app, so the run "
    "continues when a process with its code resumes it.",
    "logged_out": "Logged out.",
    "run_resumed": "Resumed through its runner.",
    "forked": "This run is a fork, branched and run from the checkpoint you chose.",
    "deleted": "Run deleted with all its rows.",
    "cancelled": "Run cancelled: a paused run's question is withdrawn, a running run stops at "
    "its next step boundary.",
}


def _pretty(value: Any) -> str:
    return to_json(value)


def _safe_next(target: str | None) -> str:
    # Only same-site paths: "//evil.example" or "https://..." would make login an open redirect.
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/pending"


class Pages:
    """The page handlers (HTML, sessions, login) of one application; :func:`create_app`
    routes to them, and the run actions of ``_operate`` and ``_control`` render through them."""

    def __init__(self, service: Service, sessions: Sessions) -> None:
        self.service = service
        self.inbox = Inbox(service.store, service.registry)
        self.sessions = sessions
        self.throttle = Throttle()
        self.templates = Environment(
            loader=PackageLoader("tether.web", "templates"),
            autoescape=True,  # everything from the store is untrusted text
            undefined=StrictUndefined,
        )
        self.templates.filters.update(
            when=when,
            pretty=_pretty,
            compact=compact,
            run_url=run_url,
            summary=summary,
            sort_params=sort_params,
            age=age,
            inspect_url=_inspect_url,
        )

    async def store_error(self, request: Request, exc: Exception) -> Response:
        """A store error (a corrupt row, a database that went away) as a 500, or a 503 when
        the store is unreachable, that names it: ``{"error", "kind", "execution_id"}`` under
        ``/api/``, the error page elsewhere (instead of a bare 500)."""
        assert isinstance(exc, StoreError)
        status = 503 if isinstance(exc, StoreUnavailableError) else 500
        message = f"{type(exc).__name__}: {exc}"
        if request.url.path.startswith("/api/"):
            body = {"error": message, "kind": type(exc).__name__, "execution_id": exc.execution_id}
            return json_response(body, status)
        return self._page(request, "error.html", {"error": message}, status_code=status)

    # --- sessions -------------------------------------------------------------------------
    def _session(self, request: Request) -> tuple[Session, str | None]:
        """The visitor's session, and a cookie value to set when it is new."""
        found = self.sessions.load(request.cookies.get(SESSION_COOKIE))
        if found is not None:
            return found, None
        return self.sessions.new(authenticated=False)

    def _set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=SESSION_MAX_AGE_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )

    def _page(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        *,
        status_code: int = 200,
        session: tuple[Session, str | None] | None = None,
    ) -> Response:
        current, new_cookie = session or self._session(request)
        body = self.templates.get_template(template).render(
            {
                "csrf_field": CSRF_FIELD,
                "csrf_token": self.sessions.csrf_token(current),
                "auth_required": self.sessions.required,
                "logged_in": current.authenticated,
                "user": current.user,
                "notice": NOTICES.get(request.query_params.get("notice", "")),
                "error": None,
                "statuses": RUN_STATUSES,
                **context,
            }
        )
        response = HTMLResponse(body, status_code=status_code)
        if new_cookie is not None:
            self._set_cookie(request, response, new_cookie)
        return response

    def _login_redirect(self, request: Request) -> Response:
        # The raw path: an id's encoding (a%2Fb) must survive the trip through the login.
        raw = request.scope.get("raw_path") or request.url.path.encode()
        target = raw.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={_quote(target)}", status_code=303)

    def _logged_in(self, request: Request) -> tuple[Session, str | None] | None:
        current = self._session(request)
        return current if current[0].authenticated else None

    # --- pages ----------------------------------------------------------------------------
    async def index(self, request: Request) -> Response:
        return RedirectResponse("/pending", status_code=303)

    async def login_form(self, request: Request) -> Response:
        nxt = _safe_next(request.query_params.get("next"))
        if not self.sessions.required:
            return RedirectResponse(nxt, status_code=303)
        return self._page(request, "login.html", {"next": nxt})

    async def login(self, request: Request) -> Response:
        form = await request.form()
        current = self.sessions.load(request.cookies.get(SESSION_COOKIE))
        nxt = _safe_next(_field(form.get("next")))
        if not self.sessions.csrf_ok(current, form.get(CSRF_FIELD)):
            return self._forbidden(request)
        client = client_address(request)
        wait = self.throttle.retry_after_seconds(client)
        if wait:
            return self._page(
                request,
                "login.html",
                {"next": nxt, "error": too_many(wait)},
                status_code=429,
            )
        ok, user = await authenticate(self.sessions, _field(form.get("token")))
        if not ok:
            self.throttle.failed(client)
            return self._page(
                request,
                "login.html",
                {"next": nxt, "error": "That is not a token of this server."},
                status_code=401,
            )
        # A new nonce on login: a session fixed before login never becomes an operator's.
        _, cookie = self.sessions.new(authenticated=True, user=user)
        response = RedirectResponse(nxt, status_code=303)
        self._set_cookie(request, response, cookie)
        return response

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        current = self.sessions.load(request.cookies.get(SESSION_COOKIE))
        if not self.sessions.csrf_ok(current, form.get(CSRF_FIELD)):
            return self._forbidden(request)
        response = RedirectResponse("/login?notice=logged_out", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    def _forbidden(self, request: Request) -> Response:
        # A throwaway session and no cookie: a refused post (often cross-site, so without the
        # operator's SameSite cookie) must never replace the operator's session.
        anonymous = (Session("", authenticated=False), None)
        return self._page(
            request,
            "error.html",
            {
                "error": "This form has expired or did not come from this page (CSRF check). "
                "Reload the page and try again."
            },
            status_code=403,
            session=anonymous,
        )

    def not_found(self, request: Request, message: str) -> Response:
        """A 404 naming what was asked for: JSON under ``/api/``, the error page elsewhere."""
        if request.url.path.startswith("/api/"):
            return json_response({"error": message}, 404)
        anonymous = (Session("", authenticated=False), None)
        return self._page(
            request, "error.html", {"error": message}, status_code=404, session=anonymous
        )

    async def pending_page(self, request: Request) -> Response:
        return await self._listing_page(request, "pending.html", pending_query, self.inbox.pending)

    async def audit_page(self, request: Request) -> Response:
        session = self._logged_in(request)
        if session is None:
            return self._login_redirect(request)
        since = request.query_params.get("since") or "7d"
        try:
            entries = await self.service.audit(
                since, limit_of(request.query_params.get("limit"), 500)
            )
        except ActionError as exc:
            return self._page(
                request, "error.html", {"error": exc.message}, status_code=400, session=session
            )
        context = {"entries": entries, "since": since}
        return self._page(request, "audit.html", context, session=session)

    async def runs_page(self, request: Request) -> Response:
        return await self._listing_page(request, "runs.html", runs_query, self.inbox.runs)

    async def _listing_page(
        self,
        request: Request,
        template: str,
        parse: Callable[[Any], Any],
        read: Callable[[Any], Awaitable[Listing]],
    ) -> Response:
        session = self._logged_in(request)
        if session is None:
            return self._login_redirect(request)
        params = {k: v for k, v in request.query_params.items() if k != "notice"}
        try:
            query = parse(request.query_params)
            listing = await read(query)
        except ActionError as exc:
            return self._page(
                request,
                "error.html",
                {"error": exc.message},
                status_code=exc.status_code,
                session=session,
            )
        start = int(params["start"]) if params.get("start", "").isdigit() else 0
        context = {
            "listing": listing,
            "query": query,
            "params": params,
            "first": start + 1,
            "next_url": listing.next_url(request.url.path, params),
            "waiting_choices": WAITING_CHOICES,
        }
        return self._page(request, template, context, session=session)

    async def run_page(self, request: Request) -> Response:
        session = self._logged_in(request)
        if session is None:
            return self._login_redirect(request)
        return await self.render_run(
            request,
            session,
            request.path_params["execution_id"],
            checkpoint_id=request.query_params.get("checkpoint") or None,
        )

    async def render_run(
        self,
        request: Request,
        session: tuple[Session, str | None],
        execution_id: str,
        *,
        error: str | None = None,
        status_code: int = 200,
        form: dict[str, str] | None = None,
        checkpoint_id: str | None = None,
    ) -> Response:
        try:
            shown = await self.service.run(execution_id, checkpoint_id)
        except ActionError as exc:
            return self._page(
                request,
                "error.html",
                {"error": exc.message},
                status_code=exc.status_code,
                session=session,
            )
        context = {**shown, "error": error, "form": form or {}}
        return self._page(request, "run.html", context, status_code=status_code, session=session)

    async def operator_post(
        self, request: Request
    ) -> tuple[FormData, tuple[Session, None]] | Response:
        """A form post's fields and session, once its size, CSRF token and login are checked;
        else the response that refuses it."""
        try:
            await capped_body(request)
        except ActionError as exc:
            return self._page(
                request,
                "error.html",
                {"error": exc.message},
                status_code=exc.status_code,
                session=(Session("", authenticated=False), None),
            )
        form = await request.form()
        current = self.sessions.load(request.cookies.get(SESSION_COOKIE))
        if not self.sessions.csrf_ok(current, form.get(CSRF_FIELD)):
            return self._forbidden(request)
        assert current is not None  # csrf_ok holds only for a loaded session
        if not current.authenticated:
            return self._login_redirect(request)
        return form, (current, None)

    async def answer_form(self, request: Request) -> Response:
        execution_id = request.path_params["execution_id"]
        approved = request.path_params["action"] == "approve"
        checked = await self.operator_post(request)
        if isinstance(checked, Response):
            return checked
        form, session = checked
        current = session[0]
        posted_id = _field(form.get("execution_id"))
        if posted_id is not None and posted_id != execution_id:
            # The form was written for another run than the address it reached.
            return await self.render_run(
                request,
                session,
                execution_id,
                error=f"This form answers run {posted_id!r}, not {execution_id!r}; nothing "
                "was changed. Reload the page and try again.",
                status_code=400,
            )
        note = (_field(form.get("note")) or "").strip() or None
        shown = (_field(form.get("checkpoint_id")) or "").strip() or None
        data_text = (_field(form.get("data")) or "").strip()
        kept = {"note": note or "", "data": data_text}
        try:
            data = parse_json_text(data_text) if data_text else None
        except json.JSONDecodeError as exc:
            return await self.render_run(
                request,
                session,
                execution_id,
                error=f"The data is not valid JSON ({exc.msg} at position {exc.pos}).",
                status_code=400,
                form=kept,
            )
        try:
            outcome = await self.service.answer(
                execution_id,
                Answer(approved, note, data, checkpoint_id=shown, actor=current.user),
            )
        except ActionError as exc:
            return await self.render_run(
                request, session, execution_id, error=exc.message, status_code=exc.status_code
            )
        return to_run_page(execution_id, "resumed" if outcome["action"] == "resumed" else "stored")


def _inspect_url(execution_id: str, checkpoint_id: str) -> str:
    """The run page showing one checkpoint in the inspector."""
    return run_page_url(execution_id, checkpoint=checkpoint_id) + "#inspect"


def _field(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="/")
