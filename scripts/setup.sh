#!/usr/bin/env bash
# Installs what Trainyard needs on a Debian machine, only what is missing:
# nats-server and PostgreSQL (Debian packages), python3 (for the examples) and the npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  say "Node.js 20 or newer is required (found: $(node --version 2>/dev/null || echo none))"
  exit 1
fi

missing=()
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v python3 >/dev/null 2>&1 || missing+=(python3)

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); elif command -v sudo >/dev/null 2>&1; then apt_get=(sudo apt-get); else
    say "missing Debian packages: ${missing[*]}; install them as root: apt-get install -y ${missing[*]}"
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { "${apt_get[@]}" update -qq && "${apt_get[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    say "could not install ${missing[*]} with apt-get (its messages are above)."
    say "install them yourself, or point Trainyard at servers you run: TRAINYARD_NATS_URL for NATS, DATABASE_URL for PostgreSQL"
    exit 1
  fi
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm packages"
  if ! npm ci --no-audit --no-fund --loglevel=error; then
    say "npm ci failed (its messages are above): Trainyard's npm packages come from the npm registry, which must be reachable"
    exit 1
  fi
fi
