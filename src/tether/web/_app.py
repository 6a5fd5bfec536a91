"""The Starlette application: the routes of the pages and the JSON API over one store."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import ConfigurationError, StoreError
from ..registry import Registry
from ..store.base import Checkpointer
from ._api import Api
from ._auth import Sessions
from ._control import api_cancel, api_delete, cancel_form, delete_form
from ._guard import LOOPBACK_NAMES, HostGuard
from ._http import SecurityHeaders
from ._operate import fork_form, resume_form
from ._pages import Pages
from ._paths import RunRoutes
from ._service import Service
from ._users import Users, check_shared_token

__all__ = ["create_app"]


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
    web = Pages(Service(store, registry), Sessions(token or None, named))
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
