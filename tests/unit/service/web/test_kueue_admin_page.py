"""The admin page's Kueue section: every configured ClusterQueue, its notebooks and batch Jobs together.

The same stand-in API server and real reader as test_kueue_pages.py (the group page's section).
"""

from __future__ import annotations

from tests.unit.service.web import test_kueue_pages as kueue_pages
from tests.unit.service.web.test_schedule_pages import ADMIN, READER, call, section, shown

# the fixtures of the group page's tests: a real ledger and web context, the stand-in API, the reader over it
ledger, ctx, api_server, kueue_ctx = kueue_pages.ledger, kueue_pages.ctx, kueue_pages.api_server, kueue_pages.kueue_ctx


def test_the_admin_page_shows_every_configured_cluster_queue(kueue_ctx):
    page = call(kueue_ctx, ADMIN, "GET", "/services/gpu/admin")
    assert page.code == 200
    part = shown(section(page.text, "kueue"))
    assert 'data-cluster-queue="cs231n"' in part and 'data-cluster-queue="thesis"' in part
    assert (
        "<td>batch Job</td><td>other</td><td>other/job-other-1</td><td>thesis</td><td>admitted</td><td>4</td>" in part
    )
    assert "<td>notebook</td><td>alice</td>" in part


def test_a_reader_of_the_usage_sees_it_too_and_the_cluster_is_read_once(kueue_ctx):
    for caller in (ADMIN, READER):
        assert 'id="kueue"' in call(kueue_ctx, caller, "GET", "/services/gpu/admin").text
    assert kueue_ctx.kueue.reads == 1


def test_without_kueue_the_admin_page_has_no_section(ctx):
    page = call(ctx, ADMIN, "GET", "/services/gpu/admin")
    assert page.code == 200 and 'id="kueue"' not in page.text
