#!/usr/bin/env bash
# Debian packages the tests need, installed only when missing (idempotent; `make test` runs it first).
#   chromium    the web page's browser test (driven by Playwright through executable_path)
#   prometheus  promtool, which validates the alert rules (tests/deploy/test_deploy_observability.py)
#   haproxy     the load balancer in front of gateway replicas (tests/support/haproxy.py)
# Not root, or no apt-get: say what is missing and carry on; the tests that need a package skip with a reason.
set -euo pipefail

# package -> the command it provides
declare -A PACKAGES=([chromium]=chromium [prometheus]=promtool [haproxy]=haproxy)

missing=()
for package in "${!PACKAGES[@]}"; do
  command -v "${PACKAGES[$package]}" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: no apt-get; not installing ${missing[*]} (the tests that need them will skip)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "system-deps: not root; not installing ${missing[*]} (the tests that need them will skip)" >&2
    exit 0
  fi
fi
echo "system-deps: installing ${missing[*]}" >&2
log="$(mktemp)"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "system-deps: could not install ${missing[*]} (the tests that need them will skip)" >&2
fi
rm -f "$log"
