"""The one gateway for notices: the Lab notice, and every other channel through Apprise.

The domain composes each notice as a :class:`~.domain.notices.Message` (which
text, which event, whose channels, which payload); this module delivers it:

- ``lab``: a notice row through the ledger's notice API (the JupyterLab extension polls it);
- ``apprise``: each Apprise URL that wants the message (:func:`~.domain.notices.wants`): the
  configured ones (:meth:`~.domain.notices.AlertSettings.apprise_channels`, the deprecated
  ``smtp_*``/``webhook_*`` settings among them) and those users and admins stored in the
  ledger (:mod:`jupyterhub_gpu.ledger.queries.channels`). Each URL is a target of its own.

A message sent ``once`` for a :class:`~.domain.notices.Once` key claims the
ledger's ``AlertSent`` row of each target *before* sending (its unique
constraint makes the claim atomic across processes). A send that fails is
logged, counted (:attr:`Notifier.counts`, shown in ``/metrics``) and releases its
claim; that target then waits before it is tried again (:data:`BACKOFF`, doubling
up to an hour), so the next ticks retry it without a dead channel costing every
message its timeout. Targets of one message are sent at once, each in a thread
of the gateway's own pool with its own time limit: a failing or slow channel
delays neither the others nor the event loop. A process killed between claim
and send loses that one notice (at most once), rather than sending it twice.

Languages: each reader gets the message in their own language (:meth:`~.domain.notices.Message.worded`).
A user (their Lab notice, their own channels, the mail of the deprecated settings, which is about them)
reads the language of their latest spawn, recorded with its start in the ledger (:func:`user_language`);
a user who has none, a group's channels and the admins' read the lab's default
(``GPUService.default_language``).

Secrets: a URL's tokens and passwords are needed to send and are kept, but
never shown. People see :func:`describe`'s service name and masked target
(Apprise's privacy form); failure reasons and Apprise's own log lines pass
through :data:`SCRUBBER`, which blanks every secret of every URL this process
has read.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import re
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import apprise
from apprise.manager_plugins import NotificationManager
from apprise.plugins.custom_json import NotifyJSON

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.i18n import LANGUAGES
from jupyterhub_gpu.ledger.queries.channels import StoredChannel, channels_for
from jupyterhub_gpu.ledger.queries.sessions import last_language
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.notices import (
    CHANNELS,
    AlertSettings,
    ChannelConfig,
    Message,
    Once,
    parse_events,
    valid_address,
    wants,
)

log = logging.getLogger("jupyterhub_gpu.notify")

#: Seconds a target waits after its first failure before it is tried again; doubled per failure up to BACKOFF_MAX.
BACKOFF = 30.0
BACKOFF_MAX = 3600.0
#: Threads that talk to far ends (Apprise's plugins block); more channels than this wait their turn, not the loop.
WORKERS = 8
#: Sends one owner (a user, a group, the admins) may have in the pool at once: one user's slow channels
#: cannot take every thread (with WORKERS 8, three owners stuck at once still leave threads for the others).
OWNER_SENDS = 2
#: Schemes that act on the service's own machine (desktop pop-ups, syslog, USB lights): never a channel.
LOCAL_SCHEMES = frozenset({"windows", "macosx", "dbus", "kde", "qt", "glib", "gnome", "syslog", "blink1", "dot"})
#: What users may add for themselves unless the admins say otherwise (``GPUService.notify_user_schemes``):
#: services whose plugin connects to a host of its own (the URL names a token, a key, a chat, never a host
#: or a mail server), so that a user's URL cannot make the service connect inside the lab's network.
DEFAULT_USER_SCHEMES = (
    "tgram",
    "dingtalk",
    "wecombot",
    "feishu",
    "lark",
    "slack",
    "discord",
    "pushplus",
    "schan",
    "wxpusher",
    "pover",
)
#: Query parameters a user's URL may not hold: they send to another server or to more people than the URL
#: names (mail's smtp, cc, bcc, a forged sender, keys), hold a connection longer than the gateway allows, or
#: follow a far end's redirect (to a host that was never checked).
USER_REFUSED_PARAMS = frozenset(
    {"smtp", "cc", "bcc", "from", "name", "reply", "pgp", "pgpprv", "pgppub", "wkd", "cto", "rto", "redirect"}
)
MAX_URL_LENGTH = 2000
#: The user names ``{username}`` expands to; any other name gets no such channel (never another recipient).
SAFE_USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: Keys of Apprise's own JSON body; a payload's other fields are added to it (``json://``, the ``:key=value`` feature).
_APPRISE_JSON_KEYS = frozenset({"version", "title", "message", "attachments", "type"})
#: Chat services whose messages render Markdown: user text is escaped as Markdown there.
_MARKDOWN_SCHEMES = frozenset(
    {"mmost", "mmosts", "rocket", "rockets", "discord", "workflow", "workflows", "matrix", "matrixs", "zulip", "gchat"}
)
_STRUCTURED_SCHEMES = frozenset({"json", "jsons", "form", "forms", "xml", "xmls", "mailto", "mailtos"})


class ChannelError(ValueError):
    """An Apprise URL that cannot be a channel; the message names why, with every secret blanked."""


class DeliveryError(RuntimeError):
    """A target did not accept a message; the message is safe to log and to show (secrets blanked)."""


# -- secrets ----------------------------------------------------------------------------------------

_TOKEN_SPLIT = re.compile(r"[/:@?&=,;#\s]+")


def _tokens(text: str) -> set[str]:
    return {t for t in _TOKEN_SPLIT.split(unquote(text)) if len(t) >= 4}


class Scrubber(logging.Filter):
    """Blanks the secrets of the URLs it was given, in texts and in the log records of Apprise's logger.

    Secrets are kept per channel (``key``: a stored channel's id, a configured URL) and forgotten with it
    (:meth:`forget`), so that a deleted channel's words are no longer blanked and scrubbing costs what the
    live channels hold, however many were added and removed.
    """

    def __init__(self):
        super().__init__()
        self._by_key: dict[str, frozenset[str]] = {}
        self._sorted: tuple[str, ...] = ()

    @property
    def secrets(self) -> frozenset[str]:
        return frozenset(self._sorted)

    def learn(self, url: str, masked: str, key: str | None = None) -> None:
        """Remember what ``url`` has that its masked form hides (tokens, passwords, keys); never its scheme."""
        secret = _tokens(url) - _tokens(masked) - {scheme_of(url)}
        known = frozenset(secret | {quote(s, safe="") for s in secret} | ({url} if url else set()))
        key = url if key is None else key
        if self._by_key.get(key) != known:
            self._by_key[key] = known
            self._rebuild()

    def forget(self, key: str) -> None:
        if self._by_key.pop(key, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        union = set().union(*self._by_key.values()) if self._by_key else set()
        self._sorted = tuple(sorted(union, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        for secret in self._sorted:
            if secret in text:
                text = text.replace(secret, "****")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if self._sorted:
            record.msg, record.args = self.scrub(record.getMessage()), ()
        return True


SCRUBBER = Scrubber()
logging.getLogger("apprise").addFilter(SCRUBBER)

_PLUGINS = NotificationManager()
ASSET = apprise.AppriseAsset(app_id="GPU", app_desc="jupyterhub-gpu", secure_logging=True)


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def describe(url: str, schemes: Iterable[str] | None = None, template: bool = False) -> tuple[str, str]:
    """``(service, masked)`` of an Apprise URL (Apprise's service name and the target with secrets hidden).

    Raises :class:`ChannelError` with Apprise's reason (secrets blanked) when Apprise cannot read it, when its
    scheme acts on the service's own machine, or when ``schemes`` is given and does not hold it. ``template``:
    the URL may hold ``{username}`` (checked with a sample name).
    """
    if not isinstance(url, str) or not url.strip():
        raise ChannelError("The URL is empty: give an Apprise URL such as 'tgram://BOT_TOKEN/CHAT_ID'.")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise ChannelError(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    if "{username}" in url and not template:
        raise ChannelError("Only notify_user_url_template may hold {username}.")
    sample = url.replace("{username}", "student") if template else url
    scheme = scheme_of(sample)
    if not scheme:
        raise ChannelError(
            "This is not an Apprise URL (it has no scheme://): see https://appriseit.com/services/ for the"
            " form of each service, e.g. 'mailto://', 'tgram://', 'dingtalk://', 'wecombot://', 'workflows://'."
        )
    if scheme in LOCAL_SCHEMES:
        raise ChannelError(f"{scheme}:// notifies the service's own machine, not a person: it cannot be a channel.")
    schemes = tuple(schemes) if schemes is not None else None
    if schemes is not None and scheme not in schemes:
        raise ChannelError(f"{scheme}:// is not among the services you may add here: {', '.join(schemes)}.")
    with apprise.LogCapture(level=logging.WARNING) as output:
        plugin = apprise.Apprise.instantiate(sample, asset=ASSET)
    if plugin is None:
        reason = " ".join(line.split(" - ", 2)[-1] for line in output.getvalue().splitlines() if line.strip())
        refused = Scrubber()  # every part of a URL Apprise cannot read may be a secret: blank them all, here only
        refused.learn(sample, f"{scheme}://")
        raise ChannelError(f"Apprise cannot use this URL: {refused.scrub(SCRUBBER.scrub(reason)) or 'unsupported'}.")
    masked = plugin.url(privacy=True).split("?", 1)[0].rstrip("/")
    hops = [h for h in hosts_of(plugin) if h not in masked.lower()] if takes_host(scheme) else []
    if hops:  # where it connects, when the URL's host is not that (mail's ?smtp=): never hidden
        masked += f" (via {', '.join(hops)})"
    if "{username}" in url:
        masked = masked.replace("student", "{username}")
    return str(plugin.service_name), masked


def _plugin_class(scheme: str):
    try:
        return _PLUGINS[scheme]  # the plugin's class, without reading a URL
    except KeyError:
        return None


def takes_host(scheme: str) -> bool:
    """Whether the plugin of ``scheme`` connects to a host its URL names (``json``, ``mailto``, ``bark``...)."""
    plugin = _plugin_class(scheme)
    return plugin is not None and "host" in getattr(plugin, "template_tokens", {})


def hosts_of(plugin) -> list[str]:
    """The hosts an Apprise plugin will connect to: its URL's host and, for mail, its SMTP server."""
    hosts = [getattr(plugin, "host", None), getattr(plugin, "smtp_host", None)]
    return list(dict.fromkeys(h.strip("[]").lower() for h in hosts if isinstance(h, str) and h))


def _refused_address(address: str) -> str | None:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for what, test in (
        ("a loopback", ip.is_loopback),
        ("a link-local (the cloud metadata service's)", ip.is_link_local),
        ("a multicast", ip.is_multicast),
        ("a private", ip.is_private),
        ("an unspecified", ip.is_unspecified),
        ("a reserved", ip.is_reserved or not ip.is_global),
    ):
        if test:
            return what
    return None


def check_host(host: str, trusted: Iterable[str] = ()) -> None:
    """ChannelError unless ``host`` resolves only to public addresses (or the admins trust it by name).

    Refused: loopback, private, link-local (169.254.169.254, the metadata service), multicast, reserved and
    every other address that is not global, and a name that does not resolve.
    """
    if host.lower() in {t.lower() for t in trusted}:
        return
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise ChannelError(f"The host {host!r} cannot be resolved.") from None
    for info in infos:
        refused = _refused_address(str(info[4][0]))
        if refused:
            raise ChannelError(
                f"The host {host!r} is {refused} address ({info[4][0]}): a user's channel may not reach the"
                " lab's own network (an admin may trust a host by name in GPUService.notify_user_hosts)."
            )


def check_user_url(url: str, trusted: Iterable[str] = ()) -> None:
    """The rules of a user's own URL on top of :func:`describe`'s; ChannelError naming what is refused.

    No query parameter of :data:`USER_REFUSED_PARAMS`, at most one recipient in ``to``, and, for a plugin
    that connects where its URL says, every such host public (:func:`check_host`).
    """
    check_user_params(url)
    scheme = scheme_of(url.strip())
    if takes_host(scheme):
        plugin = apprise.Apprise.instantiate(url.strip(), asset=ASSET)
        if plugin is None:
            raise ChannelError("Apprise cannot use this URL.")
        if hasattr(plugin, "smtp_host") and len(getattr(plugin, "targets", ()) or ()) > 1:
            raise ChannelError("The URL names several recipients (in its path or 'to'): a user's channel has one.")
        for host in hosts_of(plugin):
            check_host(host, trusted)


def check_user_params(url: str) -> None:
    """ChannelError naming the first query parameter a user's URL may not hold (:func:`check_user_url`)."""
    url = url.strip()
    query = urlsplit(url).query if "?" in url else ""
    for key, value in parse_qsl(query, keep_blank_values=True):
        key = key.lower()
        if key in USER_REFUSED_PARAMS:
            raise ChannelError(
                f"The URL's parameter {key!r} is not allowed in a user's channel (it sends elsewhere, to more"
                " people, or holds a connection longer than the service allows): remove it."
            )
        if key == "to" and len([t for t in re.split(r"[\s,;]+", value) if t]) > 1:
            raise ChannelError("The URL's parameter 'to' names several recipients: a user's channel has one.")


#: The scheme of a user's "e-mail address" channel (``labmail://ADDRESS``): sent through the lab's mail server.
LAB_MAIL = "labmail"


def lab_mail_channel(address: str) -> tuple[str, str, str]:
    """``(url, service, masked)`` of a user's e-mail address channel; ChannelError unless one plain address."""
    address = address.strip()
    if address.lower().startswith("mailto:"):
        address = address[len("mailto:") :]
    if not valid_address(address) or any(c in address for c in "?/%&=:"):
        raise ChannelError(f"{address!r} is not one e-mail address such as 'alice@example.edu'.")
    return f"{LAB_MAIL}://{address}", "E-Mail", f"{LAB_MAIL}://{address}"


def is_address(text) -> bool:
    """Whether a user gave an e-mail address (``alice@example.edu``, ``mailto:alice@...``) rather than a URL."""
    return isinstance(text, str) and "://" not in text and "@" in text


def check_mail_url(url: str, what: str = "GPUService.notify_user_mail_url") -> str:
    """The lab's mail server for users' addresses: a mailto(s):// URL naming no recipient; ValueError otherwise."""
    if scheme_of(url) not in ("mailto", "mailtos"):
        raise ValueError(
            f"{what} must be a mailto:// or mailtos:// URL such as"
            " 'mailtos://USER:PASSWORD@SMTP_HOST?from=gpu@example.edu'"
        )
    if any(k.lower() in ("to", "cc", "bcc") for k, _ in parse_qsl(urlsplit(url).query)):
        raise ValueError(f"{what} names its server and sender only (no to, cc, bcc): each user's address is added")
    try:
        _, masked = describe(url)
    except ChannelError as e:
        raise ValueError(f"{what}: {e}") from None
    SCRUBBER.learn(url, masked, "user_mail_url")
    return url


def claim_of(url: str) -> str:
    """The channel's name in ``gpu_alerts`` (16 characters): from its URL, so the same URL is claimed once."""
    return "ap" + hashlib.sha256(url.encode("utf-8")).hexdigest()[:14]


def configured_channel(spec, owner_kind: str, owner: str = "", what: str = "notify_admin_urls") -> ChannelConfig:
    """A configured channel from ``"URL"`` or ``{"url": "URL", "events": [...]}``; ValueError naming ``what``."""
    if isinstance(spec, str):
        url, events = spec, None
    elif isinstance(spec, dict) and set(spec) <= {"url", "events"} and "url" in spec:
        url, events = spec["url"], spec.get("events")
    else:
        # never the value itself: it may hold a URL with its password (only the keys are named)
        got = f"keys {sorted(map(str, spec))}" if isinstance(spec, dict) else f"a {type(spec).__name__}"
        raise ValueError(f"{what}: each channel is an Apprise URL or {{'url': ..., 'events': [...]}}, got {got}")
    template = owner == "{username}"
    try:
        service, masked = describe(url, template=template)
    except ChannelError as e:
        raise ValueError(f"{what}: {e}") from None
    return ChannelConfig(
        url=url.strip(),
        owner_kind=owner_kind,
        owner=owner,
        events=parse_events(events, owner_kind, f"{what} events"),
        service=service,
        masked=masked,
        claim=claim_of(url.strip()),
    )


def _described(channel: ChannelConfig) -> ChannelConfig:
    """A configured channel with its service and masked target (the deprecated settings' are made here)."""
    if not channel.masked:
        try:
            service, masked = describe(channel.url)
        except ChannelError as e:
            setting = "GPUService.smtp_host" if channel.claim == "email" else "GPUService.webhook_url"
            raise ChannelError(f"{setting}: {e}") from None
        channel = replace(channel, service=service, masked=masked)
    SCRUBBER.learn(channel.url, channel.masked)
    return channel


def stored_key(channel_id: int) -> str:
    """The key a stored channel's secrets are kept under in :data:`SCRUBBER`."""
    return f"stored:{channel_id}"


def forget_channel(channel_id: int) -> None:
    """A stored channel was removed: its secrets are no longer blanked (nothing of it is sent any more)."""
    SCRUBBER.forget(stored_key(channel_id))


def stored_channel(row: StoredChannel) -> ChannelConfig:
    SCRUBBER.learn(row.url, row.masked, stored_key(row.id))
    return ChannelConfig(
        url=row.url,
        owner_kind=row.owner_kind,
        owner=row.owner,
        events=row.events,
        service=row.service,
        masked=row.masked,
        claim=claim_of(f"{row.id}:{row.url}"),
        configured=False,
        stored_id=row.id,
    )


# -- what a chat shows -------------------------------------------------------------------------------

#: ``@name``, ``@channel``, ``@here``, ``@all``: a mention in Mattermost, Rocket.Chat, Teams, even without ``<>``.
_MENTION_RE = re.compile(r"@(?=[\w.-])")
_MARKDOWN_RE = re.compile(r"([\\`*_\[\]()#~>|<])")


def chat_text(text: str, scheme: str) -> str:
    """User-controlled text (user, group, server names, notebook paths, job errors) safe in a chat service.

    No name becomes a mention anywhere (a zero-width space after each ``@``); Slack's ``&``, ``<`` and ``>``
    are escaped as Slack asks (so ``<!channel>`` and links cannot be written); Markdown chats get their
    markup characters backslash-escaped. Mail and the structured webhooks (JSON, form, XML) get the text as
    it is: Apprise escapes HTML mail itself, and a JSON consumer reads values, not markup.
    """
    if scheme in _STRUCTURED_SCHEMES:
        return text
    if scheme == "slack":
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    elif scheme in _MARKDOWN_SCHEMES:
        text = _MARKDOWN_RE.sub(r"\\\1", text)
    return _MENTION_RE.sub("@\u200b", text)


# -- one target -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One URL one message goes to (a channel, its ``{username}`` and the recipients of legacy mail filled in)."""

    channel: ChannelConfig
    url: str = field(repr=False)

    @property
    def claim(self) -> str:
        return self.channel.claim

    @property
    def label(self) -> str:
        """What logs and people see: the service and its masked target."""
        return f"{self.channel.service or scheme_of(self.url)} {self.channel.masked}".strip()


def _deliver_sync(
    url: str, title: str, body: str, payload: dict | None, timeout: float, user_hosts: tuple[str, ...] | None = None
) -> None:
    """Send one message to one URL with Apprise (blocks: runs in the gateway's pool); DeliveryError if refused.

    The plugin's own socket time limits (a URL's ``cto``/``rto``) are clamped to ``timeout``, so that no
    thread outlives its send. ``user_hosts``: a user's channel, its hosts checked again now (a name may
    resolve elsewhere than when it was added; these hosts are trusted by name) and redirects not followed.
    """
    with apprise.LogCapture(level=logging.WARNING) as output:
        plugin = apprise.Apprise.instantiate(url, asset=ASSET)
        if plugin is None:
            raise DeliveryError("Apprise cannot use this URL any more (see the service's log at start)")
        plugin.socket_connect_timeout = min(float(plugin.socket_connect_timeout or timeout), timeout)
        plugin.socket_read_timeout = min(float(plugin.socket_read_timeout or timeout), timeout)
        if user_hosts is not None:
            plugin.redirects = False
            if takes_host(scheme_of(url)):
                try:
                    for host in hosts_of(plugin):
                        check_host(host, user_hosts)
                except ChannelError as e:
                    raise DeliveryError(str(e)) from None
        if payload and isinstance(plugin, NotifyJSON):
            plugin.payload_extras.update({k: v for k, v in payload.items() if k not in _APPRISE_JSON_KEYS})
        sender = apprise.Apprise(asset=ASSET)
        sender.add(plugin)
        result = sender.notify(body=body, title=title, body_format=apprise.NotifyFormat.TEXT, timeout=timeout)
    if not result:
        reasons = [e.message for e in result.logs() if e.level in ("WARNING", "ERROR")]
        if not reasons:
            reasons = [line.split(" - ", 2)[-1] for line in output.getvalue().splitlines() if line.strip()]
        raise DeliveryError(SCRUBBER.scrub("; ".join(reasons) or f"Apprise reported {result.status.name}"))


def expand(channel: ChannelConfig, message: Message, mail_url: str = "") -> str | None:
    """The URL ``channel`` sends ``message`` to; None when it has nobody to send it to."""
    url = channel.url
    if scheme_of(url) == LAB_MAIL:  # a user's address, through the lab's mail server
        if not mail_url:
            return None
        address = url.split("://", 1)[1]
        return mail_url + ("&" if "?" in mail_url else "?") + "to=" + quote(address, safe="@")
    if channel.owner == "{username}":
        if not SAFE_USERNAME.fullmatch(message.user):
            # Apprise would read a space, a comma or an @ as more recipients or another domain
            log.warning("%s: no {username} channel for a name outside [A-Za-z0-9._-]", message.what)
            return None
        url = url.replace("{username}", message.user)
    if channel.legacy_mail:
        if not message.to:
            return None
        url += "&to=" + ",".join(quote(a, safe="@") for a in message.to)
    return url


# -- once per key -------------------------------------------------------------------------


def user_language(ledger: Ledger, user: str, default: str = "en") -> str:
    """The language a user reads notices in: their latest spawn's (the ledger's record of it), else ``default``.

    A group (``group:NAME``) has none of its own: ``default``.
    """
    if user.startswith("group:"):
        return default
    return last_language(ledger, user) or default


def check_language(value: object, what: str = "GPUService.default_language") -> str:
    """A language code of :data:`jupyterhub_gpu.i18n.LANGUAGES`; ValueError naming the setting otherwise."""
    if value not in LANGUAGES:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, LANGUAGES))}, got {value!r}")
    return value


def lab_notice(ledger: Ledger, message: Message, now: datetime | None = None, default_language: str = "en") -> None:
    """The message's notice in the user's JupyterLab (a row the Lab extension polls), in the user's language
    (:func:`user_language`): the one write of notices."""
    message = message.worded(user_language(ledger, message.user, default_language))
    ledger.add_notice(
        message.user, message.kind, message.text, now or utcnow(), message.level, session_id=message.session_id
    )


def passed(ledger: Ledger, key: Once, channel: str, now: datetime) -> bool:
    """Record ``key`` as told on ``channel`` without sending it (a threshold passed while a higher one is told).

    It is then never sent late; False when it had been claimed already.
    """
    return ledger.claim_alert(key.user, key.key, key.period_start, key.threshold, channel, now, key.revision)


def _release(ledger: Ledger, key: Once, channel: str, source: str) -> None:
    try:
        ledger.release_alert(key.user, key.key, key.period_start, key.threshold, channel, key.revision)
    except Exception:
        logging.getLogger(source).exception(
            "Could not release the %s alert claim of %s; it will not be retried", channel, key.user
        )


async def attempt(
    ledger: Ledger,
    key: Once | None,
    channel: str,
    now: datetime,
    send: Callable[[], Awaitable[None]],
    what: str = "notice",
    source: str = "jupyterhub_gpu.notify",
    label: str | None = None,
) -> str:
    """Claim ``key`` on ``channel``, send, and release the claim if sending fails: ``sent``, ``told`` (claimed
    before: sent earlier, or being sent by another call) or ``failed``.

    Without a key the message is sent every time it is given. A failure is
    logged (one line for a failure of the far end, with its traceback otherwise)
    on the logger ``source`` as ``label`` (default: the channel), secrets blanked,
    and never raised: the other channels go on.
    """
    if key is not None and not ledger.claim_alert(
        key.user, key.key, key.period_start, key.threshold, channel, now, key.revision
    ):
        return "told"
    try:
        await send()
    except Exception as e:
        logging.getLogger(source).warning(
            "%s by %s failed%s: %s",
            what,
            label or channel,
            ", will retry" if key is not None else "",
            SCRUBBER.scrub(str(e)),
            exc_info=not isinstance(e, (DeliveryError, OSError, asyncio.TimeoutError)),
        )
        if key is not None:
            _release(ledger, key, channel, source)
        return "failed"
    return "sent"


async def send_once(
    ledger: Ledger,
    key: Once | None,
    channel: str,
    now: datetime,
    send: Callable[[], Awaitable[None]],
    what: str = "notice",
    source: str = "jupyterhub_gpu.notify",
    label: str | None = None,
) -> bool:
    """:func:`attempt`, answering whether it was sent now."""
    return await attempt(ledger, key, channel, now, send, what, source, label) == "sent"


# -- the gateway --------------------------------------------------------------------------


class Notifier:
    """Delivers :class:`~.domain.notices.Message` values: the Lab notice, and every Apprise target that wants it.

    ``counts`` holds ``(service, outcome)`` -> count for ``/metrics`` (outcome ``sent``, ``failed`` or
    ``deferred``: skipped while a failed target waits out its backoff). The ledger calls are short writes
    made on the event loop, as the tick makes them.
    """

    def __init__(
        self, ledger: Ledger, settings: AlertSettings | None = None, stored: bool = True, default_language: str = "en"
    ):
        self.ledger = ledger
        #: the language of readers who have none of their own: a group's channels, the admins', a user never spawned
        self.default_language = check_language(default_language)
        self.settings = settings if settings is not None else AlertSettings()
        self.configured = tuple(_described(c) for c in self.settings.apprise_channels())
        #: whether channels stored in the ledger (users', groups', admins' from the pages) are read
        self.stored = stored
        self.counts: Counter = Counter()
        #: claim -> (failures in a row, monotonic time before which it is not tried)
        self.backoff: dict[str, tuple[int, float]] = {}
        self._pool: ThreadPoolExecutor | None = None
        #: owner ("user:NAME", "group:NAME", "admin:") -> how many of its sends may use the pool at once
        self._gates: dict[tuple[int, str], asyncio.Semaphore] = {}

    @property
    def channels(self) -> tuple[str, ...]:
        """The channels a message can go on: ``lab``, and ``apprise`` (any configured or stored URL)."""
        return CHANNELS if self.configured or self.stored else ("lab",)

    def carries(self, channel: str, message: Message) -> bool:
        """Whether ``channel`` may have something for the message (a Lab text; an event for Apprise)."""
        if channel == "lab":
            return bool(message.text)
        if channel == "apprise":
            return bool(message.event) and bool(self.configured or self.stored)
        raise ValueError(f"unknown channel {channel!r}")

    def targets(self, message: Message) -> list[Target]:
        """Every URL that gets ``message``: configured and stored channels that want it, each URL once."""
        channels = [c for c in self.configured if wants(c, message)]
        if self.stored and message.event:
            users = () if message.user.startswith("group:") else (message.user,)
            for row in channels_for(self.ledger, users=users, groups=message.groups, admins=True):
                channel = stored_channel(row)
                if wants(channel, message):
                    channels.append(channel)
        out, seen = [], set()
        for channel in channels:
            url = expand(channel, message, self.settings.user_mail_url)
            if url is not None and url not in seen:
                seen.add(url)
                out.append(Target(channel, url))
        return out

    def language_of(self, target: Target, message: Message) -> str:
        """The language ``target``'s reader reads: a user's own channel (and the deprecated mail, which is about
        the user) the user's; a group's or the admins' the lab's default."""
        channel = target.channel
        if channel.owner_kind == "user" or channel.legacy_mail:
            return user_language(self.ledger, message.user, self.default_language)
        return self.default_language

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="jupyterhub-gpu-notify")
        return self._pool

    def waiting(self, claim: str) -> bool:
        """Whether the target is waiting out its backoff after failures."""
        failures = self.backoff.get(claim)
        return failures is not None and time.monotonic() < failures[1]

    async def send_to(self, target: Target, message: Message, title: str | None = None, body: str | None = None):
        """Put ``message`` (or ``title``/``body``) on one target now; DeliveryError (secrets blanked) if refused."""
        scheme = scheme_of(target.url)
        title = chat_text(message.title if title is None else title, scheme)
        if body is None:
            body = message.mail_body if scheme in ("mailto", "mailtos") else message.chat_body
        body = chat_text(body, scheme)
        timeout = float(self.settings.timeout)
        loop = asyncio.get_running_loop()
        service = target.channel.service or scheme
        channel = target.channel
        own = channel.owner_kind == "user" and not channel.configured and scheme_of(channel.url) != LAB_MAIL
        user_hosts = tuple(self.settings.user_hosts) if own else None
        owner = f"{channel.owner_kind}:{channel.owner}"
        # one owner's sends take at most OWNER_SENDS of the pool's threads: the rest wait here, on the loop
        gate = self._gates.setdefault((id(loop), owner), asyncio.Semaphore(OWNER_SENDS))
        try:
            async with gate:
                await asyncio.wait_for(
                    loop.run_in_executor(
                        self._executor(), _deliver_sync, target.url, title, body, message.payload, timeout, user_hosts
                    ),
                    timeout + 1,
                )
        except asyncio.TimeoutError:
            self._failed(target, service)
            raise DeliveryError(f"no answer within {timeout:g} seconds") from None
        except Exception:
            self._failed(target, service)
            raise
        self.backoff.pop(target.claim, None)
        self.counts[(service, "sent")] += 1

    def _failed(self, target: Target, service: str) -> None:
        failures = self.backoff.get(target.claim, (0, 0.0))[0] + 1
        self.backoff[target.claim] = (failures, time.monotonic() + min(BACKOFF * 2 ** (failures - 1), BACKOFF_MAX))
        self.counts[(service, "failed")] += 1

    async def fan_out(self, message: Message, once: Once | None, now: datetime) -> tuple[dict[str, bool], bool]:
        """Send ``message`` to each of its targets at once; ``({claim: sent now}, every target has it)``."""
        targets = self.targets(message)
        done = True

        async def one(target: Target) -> bool:
            nonlocal done
            if self.waiting(target.claim):
                self.counts[(target.channel.service or scheme_of(target.url), "deferred")] += 1
                done = False
                return False
            outcome = await attempt(
                self.ledger,
                once,
                target.claim,
                now,
                lambda: self.send_to(target, message.worded(self.language_of(target, message))),
                message.what,
                message.source,
                label=target.label,
            )
            if outcome == "failed":
                done = False
            return outcome == "sent"

        results = await asyncio.gather(*(one(t) for t in targets))
        return {t.claim: ok for t, ok in zip(targets, results, strict=True)}, done

    async def deliver(self, channel: str, message: Message, now: datetime | None = None, once: Once | None = None):
        """Put the message on one channel now; raises when that fails. Nothing for a channel it has nothing for.

        For ``apprise``, each target is claimed for ``once`` (when given) so that a retry sends only to the
        targets that did not get it; DeliveryError when any did not.
        """
        if not self.carries(channel, message):
            return
        now = now or utcnow()
        if channel == "lab":
            lab_notice(self.ledger, message, now, self.default_language)
            return
        _, done = await self.fan_out(message, once, now)
        if not done:
            raise DeliveryError(f"some channels did not take the {message.what}; they are retried")

    async def send(
        self,
        message: Message,
        channels: Iterable[str] = CHANNELS,
        once: Once | None = None,
        now: datetime | None = None,
    ) -> dict[str, bool]:
        """Deliver ``message`` on each of ``channels`` that carries it; which channels sent it now.

        The answer has ``lab`` and one entry per Apprise target (its claim: ``email`` and ``webhook`` for the
        deprecated settings, ``ap…`` for the others). With ``once``, each claims the key first and sends only
        if the claim is new, so concurrent or repeated calls send once; once every target has it, ``apprise``
        is claimed too (so that the tick skips the message). A failed target is logged (and its claim
        released, so that a later call retries it after its backoff) and the others go on.
        """
        now = now or utcnow()
        channels = tuple(channels)
        sent: dict[str, bool] = {c: False for c in channels if c != "apprise"}
        if "lab" in channels and self.carries("lab", message):
            sent["lab"] = await send_once(
                self.ledger,
                once,
                "lab",
                now,
                lambda: self.deliver("lab", message, now),
                message.what,
                message.source,
            )
        if "apprise" in channels and self.carries("apprise", message):
            results, done = await self.fan_out(message, once, now)
            sent.update(results)
            if done and once is not None:
                passed(self.ledger, once, "apprise", now)
        return sent

    async def test(self, channel: ChannelConfig, message: Message) -> None:
        """Send a test message to one channel now, backoff or not; DeliveryError (secrets blanked) if refused."""
        url = expand(channel, message, self.settings.user_mail_url)
        if url is None:
            raise DeliveryError("the lab sends no mail to users' addresses now (GPUService.notify_user_mail_url)")
        await self.send_to(Target(channel, url), message)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
