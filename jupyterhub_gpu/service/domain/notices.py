"""What a notice is, and where notices go: the pure half of the one gateway (:mod:`..notify` sends them).

Every notice the service gives a person (a budget alert, an idle warning or its
cancellation, a finished run, a right-sizing note, an instructor's weekly digest)
is composed by a domain module as a :class:`Message`: its Lab notice, its text for
the channels (subject, body), the mail recipients of the deprecated ``smtp_*``
settings, a JSON payload, which :data:`EVENTS` it is and whose channels get it.
:class:`Once` names what a message is sent once for (per channel, claimed in the
ledger's ``gpu_alerts``). :class:`AlertSettings` are the configured channels,
checked on creation.

Two kinds of channel carry notices (:data:`CHANNELS`):

- ``lab``: a notice in the ledger that the JupyterLab extension polls (always on);
- ``apprise``: every Apprise URL that wants the message's event (:func:`wants`): the
  admins' (``c.Notify.admin_urls``), the groups' (``c.Notify.group_urls`` and
  those admins add on the pages), each user's (``c.Notify.user_url_template`` and those
  users add for themselves), and the deprecated ``c.LegacyMail`` settings
  mapped onto Apprise URLs (:meth:`AlertSettings.legacy_channels`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from urllib.parse import quote, urlencode, urlsplit

from babel.dates import format_skeleton

from jupyterhub_gpu.i18n import LANGUAGES, translator
from jupyterhub_gpu.money import babel_locale

CHANNELS = ("lab", "apprise")
WEBHOOK_FORMATS = ("json", "slack")

#: What a channel can be told: budget thresholds by tier (:func:`.alerts.tier`), idle-culling warnings and their
#: cancellations, preemption notices, finished jobs and stop-when-done runs, and the instructors' weekly digest.
EVENTS = ("budget.80", "budget.95", "budget.100", "cull", "preemption", "job", "digest")
OWNER_KINDS = ("user", "group", "admin")
#: What a channel gets when its owner does not choose: a user everything about their own sessions; a group (its
#: course chat or its instructors) the budget alerts of its members and its digest; the admins what needs acting on.
DEFAULT_EVENTS: dict[str, tuple[str, ...]] = {
    "user": ("budget.80", "budget.95", "budget.100", "cull", "preemption", "job"),
    "group": ("budget.80", "budget.95", "budget.100", "digest"),
    "admin": ("budget.95", "budget.100", "preemption"),
}
#: Events of a user's own channels only: another person's idle warning or job is none of a course chat's business.
PERSONAL_EVENTS = frozenset({"cull", "job"})


#: How the pages and the test message name each event (English; Chinese in :mod:`jupyterhub_gpu.i18n`).
EVENT_NAMES = {
    "budget.80": "budget warning",
    "budget.95": "budget almost used up (95%)",
    "budget.100": "budget used up (100%)",
    "cull": "idle warnings",
    "preemption": "preemption",
    "job": "finished jobs",
    "digest": "weekly right-sizing digest",
}


def parse_events(value, owner_kind: str, what: str = "events") -> tuple[str, ...]:
    """A channel's events as given (None: the owner kind's defaults), in :data:`EVENTS` order; ValueError naming
    the bad one otherwise."""
    if value is None:
        return DEFAULT_EVENTS[owner_kind]
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"{what} must be a list of events from {', '.join(EVENTS)}, got {value!r}")
    for event in value:
        if event not in EVENTS:
            raise ValueError(f"{what}: {event!r} is not an event; use some of {', '.join(EVENTS)}")
    return tuple(e for e in EVENTS if e in set(value))


@dataclass(frozen=True)
class ChannelConfig:
    """One channel from the configuration or the ledger: an Apprise URL, whose it is, and the events it gets.

    ``url`` may hold ``{username}`` (a channel for every user, from ``c.Notify.user_url_template``); it keeps
    the far end's secrets and is never shown: pages, API answers and logs show ``masked``. ``configured``
    channels come from the config file (read-only on the pages); others from the ledger (``stored_id``).
    ``claim`` names the channel in ``gpu_alerts`` (at most 16 characters).
    """

    url: str = field(repr=False)
    owner_kind: str
    owner: str = ""
    events: tuple[str, ...] = ()
    service: str = ""
    masked: str = ""
    claim: str = ""
    configured: bool = True
    stored_id: int | None = None
    #: The deprecated mail settings: the message's own recipients (``Message.to``) are appended as ``to=``.
    legacy_mail: bool = False


def wants(channel: ChannelConfig, message: Message) -> bool:
    """Whether ``channel`` gets ``message``: its event is among the channel's, and the channel is the message's
    user's own, one of its groups', or the admins' (personal events go to the user's own channels and the admins')."""
    if message.event not in channel.events:
        return False
    if channel.owner_kind == "admin":
        return True
    if channel.owner_kind == "user":
        return channel.owner in ("{username}", message.user) and not message.user.startswith("group:")
    return channel.owner in message.groups and message.event not in PERSONAL_EVENTS


@dataclass(frozen=True)
class Message:
    """One notice to deliver, as the domain composed it; which channels carry it is the sender's choice.

    ``text`` is the Lab notice (kind ``kind``, ``level``, for ``user``, tied to
    ``session_id``); ``subject`` and ``body`` the mail to ``to`` (no recipients:
    no mail); ``payload`` the webhook's JSON (with ``"text"`` and, where there is
    one, ``"title"``: what a Slack-style webhook shows; None: no webhook).
    ``what`` names the notice in the warning logged when a channel fails, on the
    logger ``source``. ``event`` (one of :data:`EVENTS`) and ``groups`` say which
    Apprise channels get it (:func:`wants`); ``subject`` and ``body`` (or ``text``)
    are what they show.

    ``lang`` is the language it is worded in; ``words(lang)``, where the domain gives it, is the same
    message in another language (the gateway words it for each reader: :meth:`worded`).
    """

    user: str
    kind: str
    text: str = ""
    level: str = "info"
    session_id: str | None = None
    subject: str = ""
    body: str = ""
    to: tuple[str, ...] = ()
    payload: dict | None = None
    what: str = "notice"
    source: str = "jupyterhub_gpu.notify"
    event: str = ""
    groups: tuple[str, ...] = ()
    lang: str = "en"
    words: Callable[[str], Message] | None = field(default=None, compare=False, repr=False)

    def worded(self, lang: str) -> Message:
        """This message in ``lang`` (itself when it is worded so already, or cannot be worded again)."""
        if lang == self.lang or self.words is None or lang not in LANGUAGES:
            return self
        return self.words(lang)

    @property
    def title(self) -> str:
        """What a chat shows in bold or a mail as its subject."""
        return self.subject or (self.payload or {}).get("title") or ""

    @property
    def chat_body(self) -> str:
        """What a chat shows under the title: the payload's one paragraph, else the mail's body, else the Lab text."""
        return (self.payload or {}).get("text") or self.body or self.text

    @property
    def mail_body(self) -> str:
        """What a mail says: its body, else the payload's paragraph, else the Lab text."""
        return self.body or (self.payload or {}).get("text") or self.text


@dataclass(frozen=True)
class Once:
    """What a message goes out once for, per channel: the key of its ``gpu_alerts`` claim.

    ``user``, ``key`` (a budget key such as ``user:alice``, ``run:<session>``,
    ``session:<id>``, ``advice-digest:<group>``), ``period_start``, ``threshold``
    and ``revision`` (a budget's revision: a raised budget is told again).
    """

    user: str
    key: str
    period_start: datetime
    threshold: int
    revision: str = ""


def user_address(settings: AlertSettings, user: str) -> str:
    """A user's own address from ``user_email_template``; "" when students get no mail."""
    return settings.user_email_template.format(username=user) if settings.user_email_template else ""


# -- settings --------------------------------------------------------------------------


def valid_address(address: object) -> bool:
    """A plain ``local@domain`` address: no display name, spaces, or header-breaking characters."""
    if not isinstance(address, str) or address.count("@") != 1:
        return False
    local, domain = address.split("@")
    if not local or not domain or domain.startswith(".") or domain.endswith("."):
        return False
    return not any(c.isspace() or c in ',;<>"()[]\\' or ord(c) < 32 for c in address)


def _address_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"{name} must be a list of email addresses, got {value!r}")
    for address in value:
        if not valid_address(address):
            raise ValueError(f"{name}: {address!r} is not an email address such as 'ta@example.edu'")
    return tuple(value)


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go. Everything off by default except the Lab notices; checked on creation.

    Raises ValueError naming the setting when a value cannot work.
    """

    #: SMTP server host name; "" turns email off.
    smtp_host: str = ""
    smtp_port: int = 25
    #: Upgrade the SMTP connection with STARTTLS (certificate verified) before anything else.
    smtp_starttls: bool = False
    smtp_username: str = ""
    smtp_password: str = field(default="", repr=False)
    mail_from: str = ""
    #: A student's address from their user name, e.g. "{username}@example.edu"; "" = students get no mail.
    user_email_template: str = ""
    #: Instructors' addresses per group: {"cs231n": ["ta@example.edu"]}.
    instructor_emails: dict[str, tuple[str, ...]] = field(default_factory=dict)
    admin_emails: tuple[str, ...] = ()
    #: URL that receives a JSON POST per alert; "" turns the webhook off.
    webhook_url: str = ""
    #: "json" (each notice's documented payload, e.g. :func:`.alerts.budget_payload`) or "slack" ({"text": ...}).
    webhook_format: str = "json"
    #: Seconds for one delivery to one channel (an SMTP conversation, an HTTP request).
    timeout: float = 10.0
    #: The configured Apprise channels (``c.Notify.admin_urls``, ``group_urls``,
    #: ``user_url_template``), each checked when the service starts (:func:`..channels.configured_channel`).
    channels: tuple[ChannelConfig, ...] = ()
    #: The Apprise schemes a user may add for themselves (``c.Notify.user_schemes``).
    user_schemes: tuple[str, ...] = ()
    #: Hosts users' channels may reach though internal (``c.Notify.user_hosts``).
    user_hosts: tuple[str, ...] = ()
    #: The lab's mail server as a ``mailto(s)://`` URL without recipients (``c.Notify.user_mail_url``):
    #: users add "an e-mail address" sent through it; "" = users cannot add mail.
    user_mail_url: str = field(default="", repr=False)

    def __post_init__(self):
        def check_str(name):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")

        for name in ("smtp_host", "smtp_username", "smtp_password", "mail_from", "user_email_template", "webhook_url"):
            check_str(name)
        port = self.smtp_port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"smtp_port must be a port number from 1 to 65535, got {port!r}")
        if not isinstance(self.smtp_starttls, bool):
            raise ValueError(f"smtp_starttls must be True or False, got {self.smtp_starttls!r}")
        if self.smtp_password and not self.smtp_username:
            raise ValueError("smtp_password is set but smtp_username is not: set both to log in, or neither")
        if self.smtp_username and not self.smtp_password:
            raise ValueError("smtp_username is set but smtp_password is not: set both to log in, or neither")
        if self.smtp_host and not valid_address(self.mail_from):
            raise ValueError(
                f"mail_from must be the sender's address such as 'gpu@example.edu' when smtp_host is set,"
                f" got {self.mail_from!r}"
            )
        if self.mail_from and not valid_address(self.mail_from):
            raise ValueError(f"mail_from must be an address such as 'gpu@example.edu', got {self.mail_from!r}")
        if self.user_email_template:
            try:
                sample = self.user_email_template.format(username="student")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(
                    f"user_email_template may use only the field {{username}}, e.g. '{{username}}@example.edu',"
                    f" got {self.user_email_template!r} ({e!r})"
                ) from None
            if "{username}" not in self.user_email_template or not valid_address(sample):
                raise ValueError(
                    "user_email_template must make an address from {username}, e.g. '{username}@example.edu',"
                    f" got {self.user_email_template!r}"
                )
        if not isinstance(self.instructor_emails, dict):
            raise ValueError(f"instructor_emails must map group names to address lists, got {self.instructor_emails!r}")
        instructors = {}
        for group, addresses in self.instructor_emails.items():
            if not isinstance(group, str) or not group:
                raise ValueError(f"instructor_emails: group names must be non-empty strings, got {group!r}")
            instructors[group] = _address_list(f"instructor_emails[{group!r}]", addresses)
        object.__setattr__(self, "instructor_emails", instructors)
        object.__setattr__(self, "admin_emails", _address_list("admin_emails", self.admin_emails))
        if self.webhook_url:
            parts = urlsplit(self.webhook_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"webhook_url must be an http:// or https:// URL such as 'https://hooks.example.edu/gpu',"
                    f" got {self.webhook_url!r}"
                )
        if self.webhook_format not in WEBHOOK_FORMATS:
            raise ValueError(f"webhook_format must be one of {', '.join(WEBHOOK_FORMATS)}, got {self.webhook_format!r}")
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise ValueError(f"timeout must be a number of seconds above 0 and at most 600, got {timeout!r}")

    @property
    def email_enabled(self) -> bool:
        """The deprecated mail settings are on: messages carry their recipients (``Message.to``)."""
        return bool(self.smtp_host)

    @property
    def webhook_enabled(self) -> bool:
        return bool(self.webhook_url)

    def legacy_channels(self) -> tuple[ChannelConfig, ...]:
        """The deprecated ``smtp_*`` and ``webhook_*`` settings as Apprise channels, claimed as before.

        Mail: one ``mailto://`` channel (claim ``email``) to each message's own recipients
        (:func:`.alerts.recipients`, ``user_email_template``), every event. The webhook: ``json://``
        (claim ``webhook``; the documented payload's fields are added to Apprise's JSON body) or, for
        ``webhook_format = "slack"``, the URL as Apprise reads a Slack-style webhook, every event
        but the digest (which it never carried).
        """
        out = []
        if self.email_enabled:
            user, password = quote(self.smtp_username, safe=""), quote(self.smtp_password, safe="")
            auth = f"{user}:{password}@" if self.smtp_username else ""
            query = urlencode({"from": self.mail_from, "mode": "starttls" if self.smtp_starttls else "insecure"})
            out.append(
                ChannelConfig(
                    url=f"mailto://{auth}{self.smtp_host}:{self.smtp_port}?{query}",
                    owner_kind="admin",
                    events=EVENTS,
                    claim="email",
                    legacy_mail=True,
                )
            )
        if self.webhook_enabled:
            parts = urlsplit(self.webhook_url)
            if self.webhook_format == "slack":
                url = self.webhook_url
            else:
                scheme = "jsons" if parts.scheme == "https" else "json"
                url = parts._replace(scheme=scheme).geturl()
            out.append(
                ChannelConfig(
                    url=url, owner_kind="admin", events=tuple(e for e in EVENTS if e != "digest"), claim="webhook"
                )
            )
        return tuple(out)

    def apprise_channels(self) -> tuple[ChannelConfig, ...]:
        """Every configured channel: the ``notify_*`` ones, then the deprecated settings'."""
        return (*self.channels, *self.legacy_channels())


def day_in(day: date, lang: str) -> str:
    """A day in a notice or mail: ``2026-11-01`` in English (as the mails always wrote it), ``2026年11月1日`` in
    Chinese (Babel's date format, as the pages write it)."""
    return day.isoformat() if lang == "en" else format_skeleton("yMMMd", day, locale=babel_locale(lang))


def test_message(user: str, channel: ChannelConfig, lang: str = "en") -> Message:
    """The message the "send a test message" buttons send: which channel this is and what it will get."""
    _ = translator(lang)
    events = ", ".join(_(EVENT_NAMES[e]) for e in channel.events) or _("nothing")
    title = _("Test message from the GPU service")
    text = _("This channel ({target}) gets: {events}.", target=channel.masked, events=events)
    what = f"test message to {channel.service}"
    return Message(user=user, kind="test", subject=title, body=text, text=text, what=what, lang=lang)
