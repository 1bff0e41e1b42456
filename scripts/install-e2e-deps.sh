#!/usr/bin/env bash
# Installs what the server's end-to-end tests need beyond scripts/install-deps.sh: Node.js + npm
# (the official OpenAI client test) and Debian's Chromium (the chat page test, driven by
# playwright-core), Debian's nginx (the replicas-behind-a-balancer test, run from the foreground with
# deploy/nginx/perfx.conf), then the npm packages pinned in tests/e2e/node/package-lock.json.
# The tests skip with a message when any of this is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(nodejs npm chromium nginx)
missing=()
for p in "${PKGS[@]}"; do
  # Node may come from elsewhere (nvm, NodeSource); only install what has no command yet.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
    chromium) command -v chromium >/dev/null 2>&1 && continue ;;
    nginx) [ -x /usr/sbin/nginx ] && continue ;;  # the replica test runs its own instance
  esac
  missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# npm ci installs exactly the lock file's versions (playwright-core downloads no browser).
(cd tests/e2e/node && npm ci --no-audit --no-fund)
