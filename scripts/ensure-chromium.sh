#!/usr/bin/env bash
# Makes sure a Chromium exists for the web UI's browser tests (internal/webui), installing
# Debian's chromium package if needed. Idempotent and quiet when it is already there. The tests
# find it the same way: $AGATE_CHROMIUM, else chromium, chromium-browser or google-chrome.
set -euo pipefail

if [[ -n "${AGATE_CHROMIUM:-}" && -x "$AGATE_CHROMIUM" ]]; then
	exit 0
fi
for name in chromium chromium-browser google-chrome; do
	if command -v "$name" >/dev/null 2>&1; then
		exit 0
	fi
done

# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: no Chromium found and no apt-get; install Chromium, or set AGATE_CHROMIUM to a Chrome or Chromium binary" >&2
	exit 1
fi
echo "ensure-chromium: Chromium not found; installing the chromium package"
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -qq
as_root apt-get install -y -qq --no-install-recommends chromium
command -v chromium >/dev/null 2>&1 || { echo "ensure-chromium: installed chromium but cannot find it on PATH" >&2; exit 1; }
