#!/usr/bin/env bash
# Make sure PostgreSQL's server programs are installed for the ledger tests.
#
# Idempotent: safe to run any number of times.
#   * does nothing when /usr/lib/postgresql/*/bin/initdb already exists;
#   * otherwise installs Debian's `postgresql` with apt-get, telling
#     postgresql-common not to create (and start) the default "main" cluster.
#
# This script starts no server: each pytest session makes its own throwaway
# cluster with initdb in a temporary folder, runs it on a free loopback port
# and stops it at the end (tests/conftest.py, fixture `postgres_server`).
set -euo pipefail

log() { printf '[postgres-setup] %s\n' "$*" >&2; }
die() { printf '[postgres-setup] ERROR: %s\n' "$*" >&2; exit 1; }

have_initdb() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if have_initdb; then
    log "PostgreSQL is installed: $(ls -d /usr/lib/postgresql/*/bin/initdb | head -n 1)"
    exit 0
fi

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install PostgreSQL's server programs (initdb, postgres) by hand"

# The tests need the programs only; a system cluster on port 5432 would just sit there.
as_root mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" | as_root tee /etc/postgresql-common/createcluster.d/jupyterhub-gpu-tests.conf >/dev/null

log "installing Debian's postgresql"
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null

have_initdb || die "postgresql was installed but no /usr/lib/postgresql/*/bin/initdb exists"
id postgres >/dev/null 2>&1 || die "postgresql was installed but there is no 'postgres' user"
log "PostgreSQL is installed: $(ls -d /usr/lib/postgresql/*/bin/initdb | head -n 1)"
