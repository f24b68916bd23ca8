"""What a notice is, and where notices go: the pure half of the one gateway (:mod:`..notify` sends them).

Every notice the service gives a person (a budget alert, an idle warning or its
cancellation, a finished run, a right-sizing note, an instructor's weekly digest)
is composed by a domain module as a :class:`Message`: its Lab notice, its mail
(subject, body, recipients) and its webhook payload. :class:`Once` names what a
message is sent once for (per channel, claimed in the ledger's ``gpu_alerts``).
:class:`AlertSettings` are the configured channels and recipients
(``GPUService.smtp_*``, ``webhook_*``, ``*_emails``), checked on creation.

Three channels carry notices (:data:`CHANNELS`):

- ``lab``: a notice in the ledger that the JupyterLab extension polls (always on);
- ``email``: one message over SMTP to every recipient (when ``smtp_host`` is set);
- ``webhook``: a JSON POST, plain or Slack-compatible (when ``webhook_url`` is set).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

CHANNELS = ("lab", "email", "webhook")
WEBHOOK_FORMATS = ("json", "slack")


@dataclass(frozen=True)
class Message:
    """One notice to deliver, as the domain composed it; which channels carry it is the sender's choice.

    ``text`` is the Lab notice (kind ``kind``, ``level``, for ``user``, tied to
    ``session_id``); ``subject`` and ``body`` the mail to ``to`` (no recipients:
    no mail); ``payload`` the webhook's JSON (with ``"text"`` and, where there is
    one, ``"title"``: what a Slack-style webhook shows; None: no webhook).
    ``what`` names the notice in the warning logged when a channel fails, on the
    logger ``source``.
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
    #: Seconds for an SMTP conversation or a webhook request.
    timeout: float = 10.0

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
        return bool(self.smtp_host)

    @property
    def webhook_enabled(self) -> bool:
        return bool(self.webhook_url)
