"""``me``: the caller's budgets, running sessions and notices; dismissing a notice."""

from __future__ import annotations

import asyncio
import re

from tornado import web

from jupyterhub_gpu.billing import applies_to
from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.gpus.names import MIG_SLICE
from jupyterhub_gpu.ledger.queries.samples import share_holders
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.culling import capped_unit
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.service.web.auth import BaseHandler
from jupyterhub_gpu.service.web.views import notice_json, sessions_json, status_json
from jupyterhub_gpu.service.web.writes import written

_DIGITS_RE = re.compile(r"^[0-9]{1,18}$")


def _slice_in(model: str) -> str | None:
    """The MIG slice a model name spells ("A100 MIG 1g.5gb" -> "1g.5gb"), or None."""
    found = MIG_SLICE.search(model or "")
    return found.group(0).lower() if found else None


class MeHandler(BaseHandler):
    """``GET me``: the caller's budgets, running sessions and pending notices."""

    @web.authenticated
    async def get(self):
        name = self.own_name("use GET usage with user=, group= or all=true")
        # the ledger's reads on a thread: their round trips to the database are not the event loop's to wait
        self.write_json(await asyncio.to_thread(self.body, name, self.groups, self.now()))

    def body(self, name: str, groups, now) -> dict:
        """The answer (blocking: reads the ledger)."""
        currency = self.ctx.currency
        rules = [r for r in self.ledger.budget_rules() if applies_to(r, name, groups)]
        statuses = sorted(self.statuses(rules, now), key=lambda s: s.fraction, reverse=True)
        records = self.ledger.open_sessions_of(name)
        active = sessions_json(self.ledger, records, now, currency)
        for entry, unit in zip(active, self.units(records), strict=True):
            entry.update(unit)
        return {
            "user": name,
            "groups": list(groups),
            "currency": currency.code,
            "currency_symbol": currency.symbol_in(),  # English, as every *_display of the API
            "budgets": [status_json(s) for s in statuses],
            "active_sessions": active,
            "notices": [notice_json(n) for n in self.ledger.notices(name)],
        }

    def units(self, records) -> list[dict]:
        """Per session, its part of a GPU (docs/admin.md, "Shared GPUs"): ``share`` ("1/4" for a time-sliced
        share, "mig:1g.10gb" for a MIG slice, None for whole GPUs), ``memory_limit_mib`` (the cap: a share's GPU
        memory over the share count, a slice's memory, from the published profile, never from a server's report)
        and ``shared_by`` (how many open sessions of the ledger hold a share of the same GPU, this one included)."""
        none = {"share": None, "memory_limit_mib": None, "shared_by": None}
        # the catalogue only where a unit may be part of a GPU: a share's or slice's uuid, or a cluster's resource
        # placeholder (which the published profile explains); whole GPUs on a host cost no read
        if not any(capped_unit(r) or any("/" in u.partition(":")[0] for u in r.gpu_list) for r in records):
            return [dict(none) for _ in records]
        # each session's profile as its own hub published it (a user may have servers on several hubs)
        options = {hub: profile_options(self.ledger, self.ctx.advice_settings, hub) for hub in {r.hub for r in records}}
        capped = [capped_unit(r, options[r.hub]) for r in records]
        if not any(capped):
            return [dict(none) for _ in records]
        # a slice named by its profile's mig, or (profiles published before ``mig`` was kept) inside its gpu_model
        memory = {(h, o.slug): (o.memory_mib, o.mig or _slice_in(o.gpu_model)) for h in options for o in options[h]}
        counts = {(h, o.slug): o.gpu_share for h in options for o in options[h]}
        shares = [
            next(filter(None, map(parse_share_uuid, r.gpu_list)), None) if c == "share" else None
            for r, c in zip(records, capped, strict=True)
        ]
        holders = share_holders(self.ledger, sorted({s[0] for s in shares if s}))
        found = []
        for record, unit, share in zip(records, capped, shares, strict=True):
            cap, mig = memory.get((record.hub, record.profile), (None, None))
            if unit == "share" and share is None:
                # Kubernetes: a replica of a time-sliced GPU; which GPU, and who else holds one of it, only the
                # device plugin knows
                count = counts.get((record.hub, record.profile))
                found.append({"share": f"1/{count}" if count else None, "memory_limit_mib": cap, "shared_by": None})
            elif unit == "share":
                parent, _index, count = share
                found.append({"share": f"1/{count}", "memory_limit_mib": cap, "shared_by": holders[parent]})
            elif unit == "mig":
                found.append({"share": f"mig:{mig}" if mig else "mig", "memory_limit_mib": cap, "shared_by": None})
            else:
                found.append(dict(none))
        return found


class NoticeDismissHandler(BaseHandler):
    """``POST me/notices/{id}/dismiss``: hide one of the caller's own notices (idempotent)."""

    @web.authenticated
    async def post(self, notice_id: str):
        name = self.own_name("only users have notices")
        if not _DIGITS_RE.fullmatch(notice_id):
            raise web.HTTPError(400, f"A notice id is a number, got {notice_id!r}")
        body = self.json_body(allow_empty=True)
        if body not in (None, {}):
            raise web.HTTPError(400, "Dismissing a notice takes no body (or {})")
        # another user's notice is "not found", so that ids reveal nothing
        if not await written(self, Ledger.dismiss_notice, name, int(notice_id)):
            raise web.HTTPError(404, f"You have no notice {notice_id}")
        notice = next(n for n in self.ledger.notices(name, include_dismissed=True) if n.id == int(notice_id))
        self.write_json(notice_json(notice))
