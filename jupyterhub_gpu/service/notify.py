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

Which URLs may be channels, how each is shown (masked) and the secrets they hold: :mod:`.channels`.
Failure reasons and Apprise's log lines pass through its :data:`~.channels.SCRUBBER`.

Escaping: a message stays plain text here, and the channel that needs escaping escapes it once. Apprise
gets every body as ``TEXT``: its HTML mail escapes it as HTML, its Slack plugin escapes ``& < >``, its
Markdown-only plugins (Rocket.Chat, Workflows, Google Chat) escape Markdown. :func:`chat_text` escapes
only what Apprise leaves: Markdown in chats that render it from a plain-text body, and every ``@`` mention.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote

import apprise
from apprise.plugins.custom_json import NotifyJSON

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.i18n import LANGUAGES
from jupyterhub_gpu.ledger.queries.channels import channels_for
from jupyterhub_gpu.ledger.queries.sessions import last_language
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.channels import (
    ASSET,
    LAB_MAIL,
    SAFE_USERNAME,
    SCRUBBER,
    ChannelError,
    check_host,
    described,
    hosts_of,
    scheme_of,
    stored_channel,
    takes_host,
)
from jupyterhub_gpu.service.domain.notices import (
    CHANNELS,
    AlertSettings,
    ChannelConfig,
    Message,
    Once,
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
#: Keys of Apprise's own JSON body; a payload's other fields are added to it (``json://``, the ``:key=value`` feature).
_APPRISE_JSON_KEYS = frozenset({"version", "title", "message", "attachments", "type"})
#: Chat services that render Markdown from a plain-text body, which Apprise passes on as it is: user text is
#: escaped as Markdown there. (Apprise escapes a plain-text body itself for its Markdown-only plugins, such as
#: Rocket.Chat, Workflows and Google Chat, and for Slack: escaping those here too would show the escapes.)
_MARKDOWN_SCHEMES = frozenset({"mmost", "mmosts", "discord", "matrix", "matrixs", "zulip"})
_STRUCTURED_SCHEMES = frozenset({"json", "jsons", "form", "forms", "xml", "xmls", "mailto", "mailtos"})


class DeliveryError(RuntimeError):
    """A target did not accept a message; the message is safe to log and to show (secrets blanked)."""


# -- what a chat shows -------------------------------------------------------------------------------

#: ``@name``, ``@channel``, ``@here``, ``@all``: a mention in Mattermost, Rocket.Chat, Teams, even without ``<>``.
_MENTION_RE = re.compile(r"@(?=[\w.-])")
_MARKDOWN_RE = re.compile(r"([\\`*_\[\]()#~>|<])")


def chat_text(text: str, scheme: str) -> str:
    """User-controlled text (user, group, server names, notebook paths, job errors) safe in a chat service.

    No name becomes a mention anywhere (a zero-width space after each ``@``), and chats that render Markdown
    from a plain-text body get its markup characters backslash-escaped. Everything else is left to the
    channel, which escapes once what it must: Apprise's HTML mail, its Slack plugin (``& < >``, so
    ``<!channel>`` and links cannot be written) and its Markdown-only plugins. The structured webhooks (JSON,
    form, XML) and mail get the text as it is: a JSON consumer reads values, not markup.
    """
    if scheme in _STRUCTURED_SCHEMES:
        return text
    if scheme in _MARKDOWN_SCHEMES:
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
    ``deferred``: skipped while a failed target waits out its backoff). The ledger calls are short writes;
    with ``writer`` set (the service's), the Lab notices go through the ledger's one writer, off the caller's
    event loop.
    """

    #: The ledger's one writer (:class:`~jupyterhub_gpu.ledger.writer.LedgerWriter`) the Lab notices go through;
    #: None: written at once.
    writer = None

    def __init__(
        self, ledger: Ledger, settings: AlertSettings | None = None, stored: bool = True, default_language: str = "en"
    ):
        self.ledger = ledger
        #: the language of readers who have none of their own: a group's channels, the admins', a user never spawned
        self.default_language = check_language(default_language)
        self.settings = settings if settings is not None else AlertSettings()
        self.configured = tuple(described(c) for c in self.settings.apprise_channels())
        #: whether channels stored in the ledger (users', groups', admins' from the pages) are read
        self.stored = stored
        self.counts: Counter = Counter()
        #: claim -> (failures in a row, monotonic time before which it is not tried)
        self.backoff: dict[str, tuple[int, float]] = {}
        self._pool: ThreadPoolExecutor | None = None
        #: the tick's thread and the requests' loop both send: counts, backoff and the pool change under it
        self._lock = threading.Lock()
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
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="jupyterhub-gpu-notify")
            return self._pool

    def _count(self, service: str, outcome: str) -> None:
        with self._lock:
            self.counts[(service, outcome)] += 1

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
        with self._lock:
            self.backoff.pop(target.claim, None)
        self._count(service, "sent")

    def _failed(self, target: Target, service: str) -> None:
        with self._lock:
            failures = self.backoff.get(target.claim, (0, 0.0))[0] + 1
            self.backoff[target.claim] = (failures, time.monotonic() + min(BACKOFF * 2 ** (failures - 1), BACKOFF_MAX))
        self._count(service, "failed")

    async def fan_out(self, message: Message, once: Once | None, now: datetime) -> tuple[dict[str, bool], bool]:
        """Send ``message`` to each of its targets at once; ``({claim: sent now}, every target has it)``."""
        targets = self.targets(message)
        done = True

        async def one(target: Target) -> bool:
            nonlocal done
            if self.waiting(target.claim):
                self._count(target.channel.service or scheme_of(target.url), "deferred")
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
            if self.writer is None:
                lab_notice(self.ledger, message, now, self.default_language)
            else:
                await self.writer.call_when_free(lab_notice, message, now, self.default_language)
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
            raise DeliveryError("the lab sends no mail to users' addresses now (Notify.user_mail_url)")
        await self.send_to(Target(channel, url), message)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
