"""The one gateway for notices: Lab notices, mail and webhooks all go out through :class:`Notifier`.

The domain composes each notice as a :class:`~.domain.notices.Message` (which
text, which recipients, which payload); this module delivers it:

- ``lab``: a notice row through the ledger's notice API (the JupyterLab extension polls it);
- ``email``: one UTF-8 message over SMTP to the message's recipients (``smtp_host`` set);
- ``webhook``: a JSON POST of the message's payload, or for ``webhook_format = "slack"``
  its title and text only, escaped (:func:`slack_text`), when ``webhook_url`` is set.

A message sent ``once`` for a :class:`~.domain.notices.Once` key claims the
ledger's ``AlertSent`` row of each channel *before* sending (its unique
constraint makes the claim atomic across processes). A send that fails is
logged and releases its claim, so the next metering tick tries that channel
again; the other channels are not affected. A process killed between claim and
send loses that one notice (at most once), rather than sending it twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import smtplib
import ssl
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once

log = logging.getLogger("jupyterhub_gpu.notify")


class WebhookError(RuntimeError):
    """The webhook answered with something other than 2xx."""


#: Failures of the far end (logged in one line); anything else is logged with its traceback.
EXPECTED_FAILURES = (OSError, smtplib.SMTPException, HTTPClientError, WebhookError)

# -- the webhook's body -------------------------------------------------------------------

#: ``@name``, ``@channel``, ``@here``, ``@all``: a mention in Mattermost and Rocket.Chat, even without ``<>``.
_MENTION_RE = re.compile(r"@(?=[\w.-])")


def _slack_escape(text: str) -> str:
    """User-controlled text (user, group, server names, notebook paths, job errors) safe in a Slack-style message.

    ``&``, ``<`` and ``>`` as Slack asks (so ``<!channel>``, ``<@U123>`` and links
    ``<url|text>`` cannot be written), and a zero-width space after each ``@`` so
    that no name becomes a mention.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MENTION_RE.sub("@\u200b", text)


def slack_text(text: str, title: str | None = None) -> str:
    """The ``text`` of a Slack-style message: the title in bold, every part escaped."""
    body = _slack_escape(text)
    return f"*{_slack_escape(title)}*\n{body}" if title else body


def webhook_body(settings: AlertSettings, payload: dict) -> dict:
    """What every notice POSTs: the JSON ``payload`` as it is, or for ``slack`` its escaped title and text only."""
    if settings.webhook_format == "slack":
        return {"text": slack_text(str(payload.get("text") or ""), payload.get("title"))}
    return payload


# -- senders ------------------------------------------------------------------------------


def _smtp_send(settings: AlertSettings, message: EmailMessage, to: list[str]) -> None:
    with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.timeout) as smtp:
        smtp.ehlo()
        if settings.smtp_starttls:
            # Raises SMTPNotSupportedError if the server does not offer it: never fall back to plain text.
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
        if settings.smtp_username:
            smtp.login(settings.smtp_username, settings.smtp_password)
        refused = smtp.send_message(message, from_addr=settings.mail_from, to_addrs=to)
    if refused:  # some recipients got it; retrying would send them a second copy
        log.warning("SMTP server refused some alert recipients: %s", refused)


async def send_email(settings: AlertSettings, to: list[str], subject: str, body: str) -> None:
    """Send one UTF-8 message to ``to`` over SMTP (in a thread: smtplib blocks)."""
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = ", ".join(to)
    message["Subject"] = subject
    message["Date"] = format_datetime(utcnow())
    message["Message-ID"] = make_msgid(domain=settings.mail_from.split("@")[-1])
    message.set_content(body, charset="utf-8")
    await asyncio.to_thread(_smtp_send, settings, message, list(to))


async def post_webhook(settings: AlertSettings, payload: dict) -> None:
    """POST ``payload`` as JSON to the webhook; WebhookError unless it answers 2xx."""
    request = HTTPRequest(
        settings.webhook_url,
        method="POST",
        body=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
        headers={"Content-Type": "application/json; charset=utf-8"},
        connect_timeout=settings.timeout,
        request_timeout=settings.timeout,
        follow_redirects=False,
        user_agent="jupyterhub-gpu",
    )
    response = await AsyncHTTPClient().fetch(request, raise_error=False)
    if not 200 <= response.code < 300:
        reason = response.error or response.reason
        raise WebhookError(f"webhook {settings.webhook_url} answered HTTP {response.code}: {reason}")


def lab_notice(ledger: Ledger, message: Message, now: datetime | None = None) -> None:
    """The message's notice in the user's JupyterLab (a row the Lab extension polls): the one write of notices."""
    ledger.add_notice(
        message.user, message.kind, message.text, now or utcnow(), message.level, session_id=message.session_id
    )


# -- once per key -------------------------------------------------------------------------


def passed(ledger: Ledger, key: Once, channel: str, now: datetime) -> bool:
    """Record ``key`` as told on ``channel`` without sending it (a threshold passed while a higher one is told).

    It is then never sent late; False when it had been claimed already.
    """
    return ledger.claim_alert(key.user, key.key, key.period_start, key.threshold, channel, now, key.revision)


async def send_once(
    ledger: Ledger,
    key: Once | None,
    channel: str,
    now: datetime,
    send: Callable[[], Awaitable[None]],
    what: str = "notice",
    source: str = "jupyterhub_gpu.notify",
) -> bool:
    """Claim ``key`` on ``channel``, send, and release the claim if sending fails; whether it was sent now.

    Without a key the message is sent every time it is given. A failure is
    logged (one line for a failure of the far end, with its traceback otherwise)
    on the logger ``source`` and never raised: the other channels go on.
    """
    if key is not None and not ledger.claim_alert(
        key.user, key.key, key.period_start, key.threshold, channel, now, key.revision
    ):
        return False
    try:
        await send()
    except Exception as e:
        logging.getLogger(source).warning(
            "%s by %s failed%s: %s",
            what,
            channel,
            ", will retry" if key is not None else "",
            e,
            exc_info=not isinstance(e, EXPECTED_FAILURES),
        )
        if key is not None:
            try:
                ledger.release_alert(key.user, key.key, key.period_start, key.threshold, channel, key.revision)
            except Exception:
                logging.getLogger(source).exception(
                    "Could not release the %s alert claim of %s; it will not be retried", channel, key.user
                )
        return False
    return True


# -- the gateway --------------------------------------------------------------------------


class Notifier:
    """Delivers :class:`~.domain.notices.Message` values on the configured channels (the ledger's for Lab notices).

    The ledger calls are short writes made on the event loop, as the tick makes them.
    """

    def __init__(self, ledger: Ledger, settings: AlertSettings | None = None):
        self.ledger = ledger
        self.settings = settings if settings is not None else AlertSettings()

    @property
    def channels(self) -> tuple[str, ...]:
        """The channels that are on: always ``lab``, then ``email`` and ``webhook`` where configured."""
        on = ("lab",)
        if self.settings.email_enabled:
            on += ("email",)
        if self.settings.webhook_enabled:
            on += ("webhook",)
        return on

    def carries(self, channel: str, message: Message) -> bool:
        """Whether ``channel`` is on and the message has something for it (recipients, a payload)."""
        if channel == "lab":
            return bool(message.text)
        if channel == "email":
            return self.settings.email_enabled and bool(message.to)
        if channel == "webhook":
            return self.settings.webhook_enabled and message.payload is not None
        raise ValueError(f"unknown channel {channel!r}")

    async def deliver(self, channel: str, message: Message, now: datetime | None = None) -> None:
        """Put the message on one channel now; raises when that fails. Nothing for a channel it has nothing for."""
        if not self.carries(channel, message):
            return
        if channel == "lab":
            lab_notice(self.ledger, message, now)
        elif channel == "email":
            await send_email(self.settings, list(message.to), message.subject, message.body or message.text)
        else:
            await post_webhook(self.settings, webhook_body(self.settings, message.payload))  # Slack: escaped

    async def send(
        self,
        message: Message,
        channels: Iterable[str] = ("lab", "email", "webhook"),
        once: Once | None = None,
        now: datetime | None = None,
    ) -> dict[str, bool]:
        """Deliver ``message`` on each of ``channels`` that carries it; which channels sent it now.

        With ``once``, each channel claims the key first and sends only if the
        claim is new, so concurrent or repeated calls send once; a channel that
        is off or has no recipients claims nothing. A failed channel is logged
        (and its claim released, so that the next call retries it) and the
        other channels go on.
        """
        now = now or utcnow()
        channels = tuple(channels)
        sent = dict.fromkeys(channels, False)
        for channel in channels:
            if not self.carries(channel, message):
                continue
            sent[channel] = await send_once(
                self.ledger,
                once,
                channel,
                now,
                lambda channel=channel: self.deliver(channel, message, now),
                message.what,
                message.source,
            )
        return sent
