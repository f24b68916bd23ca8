"""``pricing``: the profiles and their rates, with the admins' edits."""

from __future__ import annotations

from decimal import Decimal

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.rules.overrides import apply_to_pricing
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler


class PricingHandler(BaseHandler):
    """``GET pricing``: the profiles the caller may use and their rates (all of them with custom:gpu-usage:read)."""

    @web.authenticated
    def get(self):
        profiles = apply_to_pricing(self.ledger.pricing(), load_overrides(self.ledger))  # admins' edits
        if not self.has_scope(SCOPE_USAGE_READ):
            groups = set(self.groups)
            profiles = [p for p in profiles if not p["allowed_groups"] or groups & set(p["allowed_groups"])]
        self.write_json(
            {
                "currency": self.ctx.currency.code,
                "profiles": [
                    {
                        # (the rate's configured parts and the inventory's GPU memory stay inside the service)
                        **{k: v for k, v in p.items() if k not in ("price_per_gpu_hour", "gpu_memory_mib")},
                        "price_per_hour": f"{(Decimal(p['rate_per_minute']) * 60).normalize():f}",
                        "updated": isoformat(p["updated"]),
                    }
                    for p in profiles
                ],
            }
        )
