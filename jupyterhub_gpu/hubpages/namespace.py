"""The reader's language in the namespace of JupyterHub's page templates: the one hook of :mod:`.hubpages`.

JupyterHub renders every page through ``BaseHandler.render_template``, which
starts from the handler's ``template_namespace``. :func:`install_page_language`
wraps that property once, adding what the package's templates use:

- ``_``: the catalogue's ``_(text, **values)`` in the reader's language;
- ``gpu_lang``, ``gpu_languages``: the language chosen and the names of all;
- ``gpu_switch``: the language switch's links, each the current page's query with
  ``lang=CODE`` (a relative ``?...`` link: it stays on this page, so it can never
  send the reader elsewhere);
- ``gpu_hub_text``: JupyterHub's own messages (``Invalid username or password``)
  in the reader's language, any other text (an exception's detail) as it is;
- ``gpu_error_title``: an error page's title, the standard reason of its status
  code in the reader's language, and the detail JupyterHub put in its place;
  ``gpu_extra_error_html``: JupyterHub's "try restarting from the home page".

The language is :func:`jupyterhub_gpu.i18n.language_of`'s (cookie, then
``Accept-Language``, then English), or the switch's ``?lang=`` when it names a
language, which is then kept in the cookie at the hub's base URL (the usage
pages under ``/services/gpu/`` read the same cookie).
"""

from __future__ import annotations

from http.client import responses
from urllib.parse import urlencode

from jupyterhub.handlers.base import BaseHandler
from jupyterhub.utils import url_path_join
from markupsafe import Markup

from jupyterhub_gpu.i18n import COOKIE, LANGUAGE_NAMES, LANGUAGES, language_of, query_language, translator

#: JupyterHub's own messages its pages show a student, translated by ``gpu_hub_text`` (others stay as they are).
HUB_MESSAGES = (
    "Invalid username or password",
    "Login form invalid or expired. Try again.",
    "Spawn failed",
    "Spawn cancelled",
)

#: The status codes a student may meet whose standard reasons the catalogue translates.
STATUS_CODES = (400, 401, 403, 404, 405, 408, 409, 413, 429, 500, 502, 503, 504)


def secure_cookies(handler) -> bool:
    """Whether the hub's cookies are ``Secure``: JupyterHub's own rule (an https ``public_url``, else the
    request's protocol), then its ``cookie_options``."""
    public_url = handler.settings.get("public_url")
    secure = public_url.scheme == "https" if public_url else handler.request.protocol == "https"
    return bool(handler.settings.get("cookie_options", {}).get("secure", secure))


def page_language(handler) -> str:
    """The language of a hub page: the switch's ``?lang=`` (then kept in the cookie), else :func:`language_of`."""
    chosen = query_language(handler)
    if chosen is None:
        return language_of(handler)
    handler.set_cookie(
        COOKIE,
        chosen,
        path=handler.base_url,  # JupyterHub's base URL: the hub's pages and the services' see it
        expires_days=365,
        samesite="Lax",
        secure=secure_cookies(handler),
    )
    return chosen


def switch_links(handler) -> dict[str, str]:
    """Each language's link: this page's query arguments with ``lang`` set, relative to this page."""
    args = [
        (key, value.decode("utf-8", "replace"))
        for key, values in handler.request.query_arguments.items()
        if key != "lang"
        for value in values
    ]
    return {code: "?" + urlencode([*args, ("lang", code)]) for code in LANGUAGES}


def language_namespace(handler) -> dict:
    """What the package's templates need of the reader's language (the module's docstring lists it)."""
    lang = page_language(handler)
    _ = translator(lang)

    def hub_text(text):
        return _(text) if text in HUB_MESSAGES else text

    def error_title(code, status_message=None, message=None):
        """An error page's (title, detail under it): the status code's reason in the reader's language, and
        JupyterHub's own reason (which often holds the detail) where it says more than that and the message."""
        standard = responses.get(code)
        if standard and code in STATUS_CODES:
            said = status_message not in (None, "", standard, message)
            return _(standard), hub_text(status_message) if said else ""
        return hub_text(status_message) or standard or "", ""

    def extra_error_html(markup):
        """JupyterHub's one extra HTML of error pages (``spawn_home_error``) in the reader's language; any other
        (an admin's, a spawner's) as it is."""
        if not markup or markup != getattr(handler, "spawn_home_error", None):
            return Markup(markup or "")
        before, _sep, after = _("You can try restarting your server from the {home_page}.").partition("{home_page}")
        home = url_path_join(handler.hub.base_url, "home")
        return Markup("{}<a href='{}'>{}</a>{}").format(before, home, _("home page"), after)

    return {
        "_": _,
        "gpu_lang": lang,
        "gpu_languages": LANGUAGE_NAMES,
        "gpu_switch": switch_links(handler),
        "gpu_cookie": COOKIE,
        "gpu_cookie_path": handler.base_url,
        "gpu_hub_text": hub_text,
        "gpu_error_title": error_title,
        "gpu_extra_error_html": extra_error_html,
    }


def install_page_language() -> None:
    """Wrap ``BaseHandler.template_namespace`` (once) to add :func:`language_namespace`."""
    original = BaseHandler.template_namespace
    if getattr(original.fget, "_jupyterhub_gpu_language", False):
        return

    def template_namespace(self):
        return {**original.fget(self), **language_namespace(self)}

    template_namespace._jupyterhub_gpu_language = True
    template_namespace.__doc__ = original.__doc__
    BaseHandler.template_namespace = property(template_namespace)
