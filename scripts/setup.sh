#!/usr/bin/env bash
# Installs what Trainyard needs on a Debian machine, only what is missing:
# nats-server and PostgreSQL (Debian packages), python3 (for the examples) and the npm packages.
#   --containers     also Docker (docker.io), a registry (docker-registry), what the default
#                    base image is made of (python3-pip, busybox-static), and docker-compose:
#                    for `up --runtime docker`, and the tests
#   --cluster-tools  also nats-server 2.10, for NATS clusters (tests, benchmarks, chaos), and
#                    the OpenSSH client, sshpass and sshd (the gateway's tests and benchmark)
#   --torch          also PyTorch and scikit-learn for the system's Python (python3-torch,
#                    python3-sklearn, ~1.3 GB): for examples/digits-mlp and its test
set -euo pipefail
cd "$(dirname "$0")/.."

containers=false
cluster_tools=false
torch=false
for arg in "$@"; do
  case "$arg" in
    --containers) containers=true ;;
    --cluster-tools) cluster_tools=true ;;
    --torch) torch=true ;;
    *) printf '[setup] unknown option %s\n' "$arg" >&2; exit 2 ;;
  esac
done

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
# A session's sftp channel runs OpenSSH's sftp server as the session's user, on its worker.
[ -x /usr/lib/openssh/sftp-server ] || missing+=(openssh-sftp-server)
if [ "$cluster_tools" = true ]; then
  # The gateway's tests and benchmark: the real OpenSSH client, sshpass, and sshd to compare with.
  command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
  command -v sshpass >/dev/null 2>&1 || missing+=(sshpass)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
fi
if [ "$torch" = true ]; then
  /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
  /usr/bin/python3 -c 'import sklearn' >/dev/null 2>&1 || missing+=(python3-sklearn)
fi
if [ "$containers" = true ]; then
  [ -x /usr/sbin/dockerd ] || [ -x /usr/bin/dockerd ] || missing+=(docker.io)
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  [ -d /usr/lib/python3/dist-packages/pip ] || missing+=(python3-pip)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  # For the check of infra/compose.yml.
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
fi

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
  # node-pty is built by node-gyp, which fetches Node's headers from the internet unless told
  # where they are: Debian's nodejs package has them under /usr.
  if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node_version.h ] &&
    [ "$(npm config get nodedir 2>/dev/null)" = "undefined" ]; then
    export npm_config_nodedir=/usr
  fi
  if ! npm ci --no-audit --no-fund --loglevel=error; then
    say "npm ci failed (its messages are above): Trainyard's npm packages come from the npm registry, which must be reachable"
    exit 1
  fi
fi

# The bundled client (services/cli/dist): `trainyard`'s own commands start in a third of the time
# they take from the sources. Without it they run from the sources.
if ! node --import tsx services/cli/scripts/bundle.ts; then
  say "could not bundle the trainyard client (see above): it runs from its sources, more slowly"
fi

# With --cluster-tools (tests, benchmarks, chaos): nats-server 2.10 for NATS clusters, from
# Debian trixie, unpacked under .tools/ (its binary runs on bookworm). The 2.9 of bookworm can
# fork a hash chain under concurrent appends to a clustered stream (nats-server#4320). Without
# the download, clusters run on the installed nats-server, and say so.
if [ "$cluster_tools" = true ]; then
  nats210=.tools/nats-server-2.10/usr/sbin/nats-server
  if [ ! -x "$nats210" ]; then
    say "fetching nats-server 2.10 from Debian trixie, for NATS clusters"
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lists/partial" "$tmp/cache"
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$tmp/trixie.sources"
    apt_private=(-o Dir::Etc::sourcelist=- -o "Dir::Etc::sourceparts=$tmp" -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o Debug::NoLocking=1)
    if (cd "$tmp" && apt-get -qq "${apt_private[@]}" update >/dev/null 2>&1 && apt-get -qq "${apt_private[@]}" download nats-server >/dev/null 2>&1) &&
      mkdir -p .tools/nats-server-2.10 && dpkg -x "$tmp"/nats-server_*.deb .tools/nats-server-2.10 && "$nats210" --version >/dev/null 2>&1; then
      say "nats-server $("$nats210" --version | sed 's/.*v//') is in .tools/ for NATS clusters"
    else
      rm -rf .tools/nats-server-2.10
      say "could not fetch nats-server 2.10 (no Debian mirror?); NATS clusters will run on the installed one"
    fi
    rm -rf "$tmp"
  fi
fi

