"""The Starlette application: server-rendered pages and the JSON API over one store."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..cli._filters import RUN_STATUSES
from ..cli._render import compact, to_json, when
from ..errors import ConfigurationError, StoreError, StoreUnavailableError
from ..registry import Registry
from ..serde import parse_json_text
from ..store.base import Checkpointer
from ._api import Api
from ._auth import CSRF_FIELD, SESSION_COOKIE, SESSION_MAX_AGE_SECONDS, Session, Sessions
from ._control import api_cancel, api_delete, cancel_form, delete_form
from ._guard import LOOPBACK_NAMES, HostGuard
from ._http import (
    SecurityHeaders,
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
from ._operate import fork_form, resume_form
from ._paths import RunRoutes, run_page_url, run_url
from ._service import ActionError, Answer, Service
from ._users import Throttle, Users, check_shared_token

__all__ = ["create_app"]

Handler = Callable[[Request], Awaitable[Response]]


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


class _Web:
    """Route handlers; one instance per application."""

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


def create_app(
    store: Checkpointer,
    *,
    registry: Registry | None = None,
    token: str | None = None,
    no_auth: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    users: str | os.PathLike[str] | None = None,
) -> Starlette:
    """The approvals page and JSON API as an ASGI application.

    Args:
        store: the store to show and answer interrupts in.
        registry: the application's runners; an approval resumes a run through the runner of
            its name, and only stores the answer for a run whose runner is not here.
        token: the shared operator token (``TETHER_UI_TOKEN``, at least 16 characters): a
            ``Bearer`` token for the API and the password of the login form; answers given
            with it name nobody in the audit trail (single-user mode).
        users: a users file (``tether users add``): each named user logs in with their own
            token, and their answers are recorded under their name. With or without
            ``token``.
        no_auth: serve without a token. Only for a server on a loopback address, which
            ``tether serve`` enforces; forms still carry CSRF tokens.
        allowed_hosts: the host names (no ports) the server answers to; any other ``Host``
            header is refused (403), which defeats DNS rebinding. ``["*"]`` answers to any.
            Default: the loopback names under ``no_auth``, else any host. ``tether serve``
            passes the address it listens on (see ``docs/web.md``, "Security").

    Returns:
        A Starlette application (``uvicorn.run(app)`` or any ASGI server).

    Raises:
        ConfigurationError: neither a token, users nor ``no_auth`` was given; the token is
            shorter than 16 characters; the users file cannot be read.
    """
    if no_auth:
        token, users = None, None
    elif not token and users is None:
        raise ConfigurationError(
            "the approvals page needs a token: set TETHER_UI_TOKEN, or name a users file "
            "(tether users add NAME; tether serve --users FILE), or serve with --no-auth on a "
            "loopback host"
        )
    if token:
        check_shared_token(token)
    named = None if users is None else Users(users)
    web = _Web(Service(store, registry), Sessions(token or None, named))
    api = Api(web.service, web.inbox, web.sessions, web.throttle)
    routes = [
        Route("/", web.index),
        Route("/login", web.login_form, methods=["GET"]),
        Route("/login", web.login, methods=["POST"]),
        Route("/logout", web.logout, methods=["POST"]),
        Route("/pending", web.pending_page),
        Route("/runs", web.runs_page),
        Route("/audit", web.audit_page),
        Route("/api/audit", api.audit),
        Route("/api/runs", api.runs),
        Route("/api/pending", api.pending),
        Mount("/static", StaticFiles(packages=[("tether.web", "static")]), name="static"),
    ]
    # Everything under a run's address goes through RunRoutes, which reads the id from the
    # raw path as one encoded segment (tether.web._paths): `/runs/a%2Fb/approve` answers
    # run "a/b", and no id can reach another run's route. Actions: (method, sub-path).
    pages = RunRoutes(
        "/runs",
        {
            ("GET", ""): web.run_page,
            ("POST", "approve"): web.answer_form,
            ("POST", "reject"): web.answer_form,
            ("POST", "resume"): functools.partial(resume_form, web),
            ("POST", "fork"): functools.partial(fork_form, web),
            ("POST", "cancel"): functools.partial(cancel_form, web),
            ("POST", "delete"): functools.partial(delete_form, web),
        },
        web.not_found,
    )
    api_runs = RunRoutes(
        "/api/runs",
        {
            ("GET", ""): api.run,
            ("POST", "approve"): api.answer,
            ("POST", "reject"): api.answer,
            ("POST", "cancel"): functools.partial(api_cancel, api),
            ("POST", "delete"): functools.partial(api_delete, api),
        },
        web.not_found,
    )
    for prefix, routed in (("/runs", pages), ("/api/runs", api_runs)):
        alias = prefix[:-1]  # /run?execution_id=.. for the ids no segment can carry
        routes += [
            Route(f"{prefix}/{{rest:path}}", routed.dispatch, methods=["GET", "POST"]),
            Route(alias, routed.dispatch, methods=["GET", "POST"]),
            Route(f"{alias}/{{rest:path}}", routed.dispatch, methods=["GET", "POST"]),
        ]
    app = Starlette(routes=routes, exception_handlers={StoreError: web.store_error})
    app.add_middleware(SecurityHeaders)
    hosts = allowed_hosts if allowed_hosts is not None else (LOOPBACK_NAMES if no_auth else "*")
    app.add_middleware(HostGuard, allowed_hosts=hosts)
    return app
