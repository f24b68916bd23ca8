"""``samples``: a running server reports its GPU usage (its own session only)."""

from __future__ import annotations

import asyncio

from tornado import web

from jupyterhub_gpu.ledger.queries.samples import Push
from jupyterhub_gpu.ledger.writer import LedgerWriter, WriterBusy
from jupyterhub_gpu.rules.samples import SampleError, check_sample_times, parse_sample
from jupyterhub_gpu.service.web.auth import BaseHandler, is_server_token

WRITER_BUSY = (
    "The gpu service is writing more samples than its database takes in just now; this sample was not stored."
    " Send it again in {seconds} s (Retry-After)."
)


class SamplesHandler(BaseHandler):
    """``POST samples``: a running server reports its GPU usage (its own session only)."""

    @web.authenticated
    async def post(self):
        try:
            sample = parse_sample(self.json_body())
        except SampleError as e:
            raise web.HTTPError(400, str(e)) from None
        user = self.current_user["name"]
        # read on a thread: a round trip to the database (PostgreSQL's over the network) is not the loop's to wait
        record = await asyncio.to_thread(self.ledger.get_session, sample.session_id)
        if record is None or record.user != user or not self.is_user:
            raise web.HTTPError(403, "A server may only report the usage of its own session.")
        if not is_server_token(self.current_user, record, self.ledger.hub):
            raise web.HTTPError(
                403,
                "Only the session's own server may report its usage, with the token JupyterHub gave it"
                " (a token made with the same scopes is not that token).",
            )
        now = self.now()
        moments = [m for m in (sample.last_activity, sample.last_kernel_activity) if m is not None]
        # within the skew a server's clock may run ahead: its activity is never later than now
        activity = min(max(moments), now) if moments else None
        try:
            check_sample_times(sample, record.started, record.stopped, now)
            # written by the ledger's writer with the other pushes waiting, in one transaction, off the event
            # loop; answered once committed (a refused one fails alone)
            row = await LedgerWriter.of(self.ledger).push(Push(user, sample, record.gpu_count, activity))
        except SampleError as e:
            raise web.HTTPError(400, str(e)) from None
        except WriterBusy as e:  # nothing was written: the server keeps its sample and pushes it again
            self.set_header("Retry-After", str(e.retry_after))
            raise web.HTTPError(503, self._(WRITER_BUSY, seconds=e.retry_after)) from None
        self.write_json({"session_id": sample.session_id, "minute": row.minute.isoformat() + "Z"}, status=201)
