#!/usr/bin/env bash
# Makes sure PostgreSQL server binaries (initdb, pg_ctl, postgres) and the
# `postgres` OS user exist, installing Debian's postgresql package if needed.
# Idempotent and quiet when everything is already there. Tests and
# `scheduler dev` find the binaries the same way (internal/devenv/localpg).
set -euo pipefail

has_server() {
	[[ -n "$1" && -x "$1/initdb" && -x "$1/pg_ctl" && -x "$1/postgres" ]]
}

find_bindir() {
	local dir
	if dir=$(pg_config --bindir 2>/dev/null) && has_server "$dir"; then
		echo "$dir"
		return 0
	fi
	# Newest /usr/lib/postgresql/<major>/bin (Debian keeps them off PATH).
	for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
		if has_server "$dir"; then
			echo "$dir"
			return 0
		fi
	done
	if dir=$(command -v initdb 2>/dev/null) && has_server "$(dirname "$dir")"; then
		dirname "$dir"
		return 0
	fi
	return 1
}

# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

if ! bindir=$(find_bindir); then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "ensure-postgres: no PostgreSQL server binaries found and no apt-get;" \
			"install PostgreSQL (initdb, pg_ctl, postgres) with your package manager" >&2
		exit 1
	fi
	echo "ensure-postgres: PostgreSQL server not found; installing the postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	as_root apt-get update -qq
	as_root apt-get install -y -qq --no-install-recommends postgresql
	if ! bindir=$(find_bindir); then
		echo "ensure-postgres: installed postgresql but still cannot find initdb/pg_ctl/postgres" >&2
		exit 1
	fi
	echo "ensure-postgres: PostgreSQL server binaries in $bindir"
fi

# initdb and postgres refuse to run as root; as root, tests run them as this user.
if ! id -u postgres >/dev/null 2>&1; then
	echo "ensure-postgres: creating system user postgres"
	as_root useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi
