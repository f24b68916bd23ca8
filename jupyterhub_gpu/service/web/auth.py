"""Who is asking: JupyterHub OAuth, the service's custom scopes, and the JSON error answers.

Every handler authenticates through JupyterHub (OAuth cookie in browsers,
``Authorization: token …`` for programs); a request without valid credentials
gets a 403 JSON answer, never a redirect. A user may read only their own usage;
budgets and other users' data need the custom scopes below. Every handler of the
service (REST API, pages, metrics) derives from :class:`BaseHandler`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import httputil, web

from jupyterhub_gpu.billing import BudgetRule, BudgetStatus
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.params import BadRequest, parse_json_body

SCOPE_USAGE_READ = "custom:gpu-usage:read"  # read everyone's usage
SCOPE_BUDGETS_WRITE = "custom:gpu-budgets:write"  # set and delete budgets
SCOPE_METRICS_READ = "custom:gpu-metrics:read"  # scrape /metrics

#: What a refused caller is told (the pages show them in the reader's language: the catalogs of jupyterhub_gpu/locale/).
TOKEN_REFUSED = (
    "The token was refused: JupyterHub does not know it (mistyped, expired or revoked). Make a new one on the"
    " hub's token page ({url}) and send it as 'Authorization: token ...'."
)
TOKEN_LACKS_SCOPE = (
    "This needs the {needs} scope, and the token sent does not carry it. A token holds the scopes chosen when it"
    " was made (on the hub's token page: none chosen means all of its owner's), and its owner's role must grant"
    " them (c.JupyterHub.load_roles, docs/service-api.md)."
)
LOGIN_LACKS_SCOPE = (
    "This needs the {needs} scope, and your login to the gpu service does not carry it. If your JupyterHub role"
    " grants it, it is held but not granted to the service's OAuth client: a browser gets only the scopes listed"
    " in the gpu service's oauth_client_allowed_scopes. The administrator adds them there (c.JupyterHub.services,"
    ' the "gpu" entry: "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES); docs/service.md) and restarts the'
    " hub; then log out of JupyterHub and in again."
)

CUSTOM_SCOPES = {
    SCOPE_USAGE_READ: {"description": "Read every user's GPU usage, sessions and budgets."},
    SCOPE_BUDGETS_WRITE: {"description": "Set and delete GPU budgets of users and groups."},
    SCOPE_METRICS_READ: {"description": "Read the gpu service's Prometheus metrics."},
}


def instructor_groups(scopes) -> tuple[str, ...]:
    """The groups named by ``custom:gpu-usage:read!group=NAME`` among a token's scopes (instructors' roles)."""
    prefix = SCOPE_USAGE_READ + "!group="
    return tuple(sorted({s[len(prefix) :] for s in scopes if s.startswith(prefix) and len(s) > len(prefix)}))


@dataclass(frozen=True)
class Caller:
    """Who is asking: the one place for what the caller's scopes allow, shared by the REST API and the pages.

    Made from JupyterHub's model of the caller (:meth:`BaseHandler.caller`); the rules of who may do what
    (:mod:`.actions`) take it with the :class:`~.context.WebContext`, so that a page's form and the REST
    handler ask the same question. A refusal is a ``web.HTTPError`` with its words in ``language()``.
    """

    name: str = ""
    kind: str = "user"
    scopes: frozenset[str] = frozenset()
    groups: tuple[str, ...] = ()
    #: Whether the request came with a token (not the browser's login): the fix for a missing scope names it.
    #: Asked, as the language below, only when there is a refusal to word.
    by_token: Callable[[], bool] = field(default=lambda: False, compare=False, repr=False)
    #: The language of a refusal's words (a page's choice of language sets its cookie when first asked).
    language: Callable[[], str] = field(default=lambda: "en", compare=False, repr=False)

    @classmethod
    def of(
        cls,
        model: dict | None,
        by_token: Callable[[], bool] | None = None,
        language: Callable[[], str] | None = None,
    ) -> Caller:
        model = model or {}
        lazy = {"by_token": by_token, "language": language}
        return cls(
            name=str(model.get("name", "")),
            kind=model.get("kind", "user"),
            scopes=frozenset(model.get("scopes", [])),
            groups=tuple(model.get("groups") or ()),
            **{k: v for k, v in lazy.items() if v is not None},
        )

    @property
    def is_user(self) -> bool:
        return self.kind == "user"

    @property
    def instructor_groups(self) -> tuple[str, ...]:
        """The groups whose usage the caller may read: a role with ``custom:gpu-usage:read!group=NAME`` per group."""
        return instructor_groups(self.scopes)

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def can_read_group(self, group: str) -> bool:
        return self.has_scope(SCOPE_USAGE_READ) or group in self.instructor_groups

    def missing_scope_message(self, scopes) -> str:
        """Why the caller lacks ``scopes`` where it may hold them, and the fix: its login or its token."""
        needs = " or ".join(scopes)
        return translator(self.language())(TOKEN_LACKS_SCOPE if self.by_token() else LOGIN_LACKS_SCOPE, needs=needs)

    def require_scope(self, *scopes: str) -> None:
        """403 unless the caller holds one of ``scopes``."""
        if not any(self.has_scope(s) for s in scopes):
            raise web.HTTPError(403, self.missing_scope_message(scopes))

    def require_group(self, group: str) -> None:
        """403 unless the caller reads everyone's usage or is an instructor of ``group``."""
        if not self.can_read_group(group):
            scopes = (SCOPE_USAGE_READ, f"{SCOPE_USAGE_READ}!group={group}")
            raise web.HTTPError(403, self.missing_scope_message(scopes))

    def own_name(self, what: str) -> str:
        """The calling user's name; a service has no usage of its own."""
        if not self.is_user:
            raise web.HTTPError(403, f"Service {self.name} is not a user and has no GPU usage of its own; {what}.")
        return self.name


def is_server_token(caller: dict | None, session, hub: str | None = None) -> bool:
    """Whether the caller's token is the one JupyterHub gave the server of ``session`` (a ledger record).

    The spawner records the id of its server's API token with the session (``server_token``), and the hub
    says which token a request came with (``token_id`` of its ``/api/user`` answer): only that token passes.
    A token the user made with the same scopes (``servers!server=USER/NAME`` is a filter anyone may ask for
    their own servers) is another token, as is the token of another server of the same user. For a session
    recorded without it (before the ledger kept it) the token must at least hold that server's filter. With
    ``hub`` (the service's own), a session of another hub on a shared ledger never passes: each hub numbers its
    own tokens, so a token of this hub may have the id another hub's session keeps.
    """
    caller = caller or {}
    if hub is not None and getattr(session, "hub", hub) != hub:
        return False
    if caller.get("kind", "user") != "user" or caller.get("name") != session.user:
        return False
    own = getattr(session, "server_token", None)
    if own:
        return caller.get("token_id") == own
    return f"servers!server={session.user}/{session.server_name}" in set(caller.get("scopes") or ())


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """JSON in, JSON out, errors as ``{"status": 4xx, "message": "..."}``.

    Requests without credentials are answered 403, not redirected to the login
    page: API clients and scrapers cannot follow a login form. Only a browser
    (one that carries the hub's session cookie, or navigates to the URL) is sent
    through JupyterHub's OAuth, which ends back here with the OAuth cookie set.
    """

    _refused_model = None

    def initialize(self, ctx: WebContext):
        self.ctx = ctx

    @property
    def _(self):
        """The texts of answers: English for the API; pages answer in the reader's language."""
        return translator("en")

    @property
    def hub_auth(self):
        return self.ctx.hub_auth

    @property
    def ledger(self) -> Ledger:
        return self.ctx.ledger

    async def prepare(self):
        # The first check of a token or cookie asks the hub. HubAuthenticated.get_current_user asks it
        # synchronously (blocking the event loop, and every other request, until the hub answers); awaited
        # here, the loop goes on meanwhile, and HubAuth keeps the answer on the handler for
        # get_current_user. A check that fails here is forgotten, so that it fails where it always did:
        # when the handler asks who is calling (a public endpoint never does).
        try:
            await self.hub_auth.get_user(self, sync=False)
        except Exception:
            self.__dict__.pop("_cached_hub_user", None)

    def check_hub_user(self, model):
        try:
            return super().check_hub_user(model)
        except UserNotAllowed:
            self._refused_model = model
            raise

    def get_login_url(self):
        if self._is_browser() and self._refused_model is None:
            return super().get_login_url()
        raise web.HTTPError(403, self._unauthenticated_message())

    def _is_browser(self) -> bool:
        """A browser's GET without a token: logged in to the hub, or navigating to this URL."""
        headers = self.request.headers
        if self.request.method not in ("GET", "HEAD") or "Authorization" in headers:
            return False
        return bool(self.get_cookie("jupyterhub-session-id")) or headers.get("Sec-Fetch-Mode") == "navigate"

    def _unauthenticated_message(self) -> str:
        if self._refused_model is not None:
            model = self._refused_model
            needs = " or ".join(sorted(self.hub_scopes or (), key=len, reverse=True)) or "access to the gpu service"
            return (
                f"{model.get('kind', 'user').title()} {model['name']} may not use the gpu service:"
                f" the token needs the scope {needs} (see the service's documentation for the role to grant)."
            )
        if self.request.method not in ("GET", "HEAD") and self.get_cookie(self.hub_auth.cookie_name):
            return (
                "A browser's request that changes something needs the X-XSRFToken header (JupyterHub's XSRF"
                " protection, from the service's page); programs send 'Authorization: token ...' instead."
            )
        if self.hub_auth.get_token(self, in_cookie=False):
            return self._(TOKEN_REFUSED, url=f"{self.hub_auth.hub_prefix}token")
        return (
            "Authentication required: send 'Authorization: token <JupyterHub API token>',"
            " or log in to JupyterHub in this browser."
        )

    # -- who is asking -----------------------------------------------------------
    @property
    def caller(self) -> Caller:
        """Who is asking, for the rules of who may do what (:mod:`.actions`); the words of a refusal in the
        language of the answers (the API's English, a page's reader's language)."""
        return Caller.of(self.current_user, self._sent_a_token, self.answer_language)

    def _sent_a_token(self) -> bool:
        return bool(self.hub_auth.get_token(self, in_cookie=False))

    def answer_language(self) -> str:
        """The language of the answers' words: English for the API (pages: the reader's)."""
        return "en"

    def has_scope(self, scope: str) -> bool:
        return self.caller.has_scope(scope)

    def require_scope(self, *scopes: str) -> None:
        """403 unless the caller holds one of ``scopes``."""
        self.caller.require_scope(*scopes)

    def missing_scope_message(self, scopes) -> str:
        """Why the caller lacks ``scopes`` where it may hold them, and the fix: its login or its token."""
        return self.caller.missing_scope_message(scopes)

    @property
    def instructor_groups(self) -> tuple[str, ...]:
        """The groups whose usage the caller may read: a role with ``custom:gpu-usage:read!group=NAME`` per group."""
        return self.caller.instructor_groups

    def can_read_group(self, group: str) -> bool:
        return self.caller.can_read_group(group)

    def require_group(self, group: str) -> None:
        """403 unless the caller reads everyone's usage or is an instructor of ``group``."""
        self.caller.require_group(group)

    @property
    def is_user(self) -> bool:
        return self.caller.is_user

    def own_name(self, what: str) -> str:
        """The calling user's name; a service has no usage of its own."""
        return self.caller.own_name(what)

    @property
    def groups(self) -> tuple[str, ...]:
        return self.caller.groups

    # -- input and output --------------------------------------------------------
    def json_body(self, allow_empty: bool = False):
        try:
            return parse_json_body(self.request.body, allow_empty=allow_empty)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def send_csv(self, name: str, text: str) -> None:
        """A CSV download named ``gpu-NAME.csv`` (the text from one of :mod:`.views`' CSV writers)."""
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="gpu-{name}.csv"')
        self.set_header("Cache-Control", "no-store")
        self.finish(text)

    def write_error(self, status_code, **kwargs):
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = http_error_text(exc)
        elif status_code == 403 and self.current_user is None:
            # tornado's @authenticated refuses unauthenticated POST/PUT/DELETE without a message
            message = self._unauthenticated_message()
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def now(self) -> datetime:
        return utcnow()

    def statuses(self, rules: list[BudgetRule], now: datetime) -> list[BudgetStatus]:
        return self.ledger.statuses_of(rules, now, self.ctx.tz)


def http_error_text(e: web.HTTPError) -> str:
    """The message an ``HTTPError`` carries (the API's words), as ``write_error`` shows it.

    Tornado doubles each ``%`` of a message given without arguments (so that ``log_message % args`` is always
    safe): formatting with the arguments, none included, gives the message back as it was written.
    """
    if e.log_message:
        return e.log_message % tuple(e.args)
    return e.reason or httputil.responses.get(e.status_code, "")


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    """The OAuth callback, with the service's one HubOAuth (which holds the OAuth states)."""

    def initialize(self, ctx: WebContext):
        self.ctx = ctx

    @property
    def hub_auth(self):
        return self.ctx.hub_auth
