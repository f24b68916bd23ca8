"""Where the configured alert channels connect, reached without sending; and a test message through the gateway.

The channels are the service's own (:meth:`AlertSettings.apprise_channels`: the ``c.Notify`` Apprise URLs
and the deprecated ``c.LegacyMail`` settings); people see them as :func:`~jupyterhub_gpu.service.channels.describe`
shows them (secrets hidden). A test message goes through the gateway's :meth:`Notifier.test`.
"""

from __future__ import annotations

import asyncio
import smtplib
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlparse

import apprise

from jupyterhub_gpu.service.channels import describe
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message
from jupyterhub_gpu.service.notify import Notifier

# where an Apprise plugin of a cloud service keeps its fixed API address (not service_url: that is its homepage)
API_ATTRIBUTES = ("notify_url", "webhook_url", "api_url")


@dataclass(frozen=True)
class Endpoint:
    """Where one configured alert channel connects: what the doctor reaches without sending anything."""

    label: str  # the channel as people see it (service name and masked target: no secret)
    kind: str  # "smtp" (EHLO), "tcp" (a connection) or "unknown" (only a send tells)
    host: str = ""
    port: int = 0
    tls: str = ""  # for smtp: "ssl", "starttls" or ""


def alert_settings(service) -> AlertSettings:
    """The service's alert settings (``c.Notify``, ``c.LegacyMail``), as :meth:`GPUService.initialize` builds them.

    ValueError names a refused setting.
    """
    return service.make_alert_settings()


def _url_host(url: str) -> tuple[str, int]:
    parts = urlparse(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def endpoint(channel) -> Endpoint:
    """Where a configured Apprise channel connects (its SMTP server, its host, or its service's API)."""
    template = "{username}" in channel.url
    service, masked = describe(channel.url, template=template)  # Apprise's name and the target, secrets hidden
    label = f"{service} {masked}" + (" (every user's)" if template else "")
    plugin = apprise.Apprise.instantiate(channel.url.replace("{username}", "student"))
    if plugin is None:
        return Endpoint(label, "unknown")
    if getattr(plugin, "smtp_host", None):
        mode = str(getattr(plugin, "secure_mode", "") or "")
        tls = mode if mode in ("ssl", "starttls") else ""
        port = plugin.port or {"ssl": 465, "starttls": 587}.get(tls, 25)
        return Endpoint(label, "smtp", plugin.smtp_host, port, tls)
    # a cloud service's fixed API address (tgram, dingtalk...), else the host in the URL (json, mmost...)
    api = [getattr(type(plugin), name, None) for name in API_ATTRIBUTES]
    api = [url for url in api if isinstance(url, str) and url.startswith("https://")]
    if api:
        host, port = _url_host(api[0])
        return Endpoint(label, "tcp", host, port)
    if plugin.host:
        return Endpoint(label, "tcp", plugin.host, plugin.port or (443 if plugin.secure else 80))
    return Endpoint(label, "unknown")


def reach(target: Endpoint, timeout: float) -> str:
    """Connect to an endpoint (EHLO for mail, with STARTTLS or TLS as configured); what answered, or raises."""
    if target.kind == "smtp":
        if target.tls == "ssl":
            connection = smtplib.SMTP_SSL(
                target.host, target.port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            connection = smtplib.SMTP(target.host, target.port, timeout=timeout)
        with connection as smtp:
            code, banner = smtp.ehlo()
            if code != 250:
                raise smtplib.SMTPResponseException(code, banner)
            if target.tls == "starttls":
                if not smtp.has_extn("starttls"):
                    raise smtplib.SMTPNotSupportedError("the server does not offer STARTTLS, which the URL asks for")
                smtp.starttls(context=ssl.create_default_context())
            return f"EHLO answered ({banner.decode('utf-8', 'replace').splitlines()[0][:60]})"
    with socket.create_connection((target.host, target.port), timeout=timeout):
        return "accepts connections"


def send_test(settings: AlertSettings, channel) -> str:
    """Send one test message to a channel through the gateway's own delivery (its test send reads no ledger)."""
    text = "A test from `jupyterhub-gpu doctor --send-test`: this channel reaches you."
    message = Message(
        user="jupyterhub-gpu-doctor",
        kind="test",
        text=text,
        subject="jupyterhub-gpu: test message",
        body=text,
        to=tuple(settings.admin_emails),
        payload={"event": "test", "title": "jupyterhub-gpu: test message", "text": text},
        event="digest",
    )
    if getattr(channel, "legacy_mail", False) and not settings.admin_emails:
        raise ValueError("no LegacyMail.admin_emails to send the test mail to")
    notifier = Notifier(None, settings, stored=False)
    try:
        asyncio.run(notifier.test(channel, message))
    finally:
        notifier.close()
    return "test message sent"
