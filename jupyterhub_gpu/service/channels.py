"""Notice channels: which Apprise URLs may be one, how each is shown, and the secrets they hold.

A channel is one Apprise URL (``mailto://``, ``tgram://``, ``json://``...): configured by the admins
(:func:`configured_channel`), or stored in the ledger by a user, a group's instructor or an admin
(:func:`stored_channel`; added through the pages and the REST API, which check a user's URL with
:func:`check_user_url` and :func:`check_user_params`). :mod:`.notify` delivers messages to them.

Secrets: a URL's tokens and passwords are needed to send and are kept, but never shown. People see
:func:`describe`'s service name and masked target (Apprise's privacy form); failure reasons and Apprise's
own log lines pass through :data:`SCRUBBER`, which blanks every secret of every URL this process has read.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import apprise
from apprise.manager_plugins import NotificationManager

from jupyterhub_gpu.ledger.queries.channels import StoredChannel
from jupyterhub_gpu.service.domain.notices import ChannelConfig, parse_events, valid_address

#: Schemes that act on the service's own machine (desktop pop-ups, syslog, USB lights): never a channel.
LOCAL_SCHEMES = frozenset({"windows", "macosx", "dbus", "kde", "qt", "glib", "gnome", "syslog", "blink1", "dot"})
#: What users may add for themselves unless the admins say otherwise (``c.Notify.user_schemes``):
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


class ChannelError(ValueError):
    """An Apprise URL that cannot be a channel; the message names why, with every secret blanked."""


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
        raise ChannelError("Only Notify.user_url_template may hold {username}.")
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
                " lab's own network (an admin may trust a host by name in Notify.user_hosts)."
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


def check_mail_url(url: str, what: str = "Notify.user_mail_url") -> str:
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


def configured_channel(spec, owner_kind: str, owner: str = "", what: str = "Notify.admin_urls") -> ChannelConfig:
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


def described(channel: ChannelConfig) -> ChannelConfig:
    """A configured channel with its service and masked target (the deprecated settings' are made here)."""
    if not channel.masked:
        try:
            service, masked = describe(channel.url)
        except ChannelError as e:
            setting = "LegacyMail.smtp_host" if channel.claim == "email" else "LegacyMail.webhook_url"
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
