"""Alembic environment for the ledger: run with the connection the caller passes in."""

from alembic import context

from jupyterhub_gpu.ledger.models import metadata

connection = context.config.attributes.get("connection")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
