#!/usr/bin/env bash
# Starts the compose cluster of deploy/compose.yaml (etcd ×3, job managers ×2 with HA, task managers ×3, an S3
# store, mutual TLS, a client token) under podman-compose, once the images exist (scripts/image.sh builds them
# when they do not). Waits until a job manager leads and three task managers have registered, then prints as
# its last line a JSON object for a `weir` on the host: the job managers' client addresses (`jobmanagers`), the
# token file (`token_file`), the CA (`ca_file`), the directory the task managers write job output to under
# /var/lib/weir/out (`out_dir`), and the compose project (`project`).
#
#   WEIR_CLUSTER_DIR  where certificates, token and output go (default: a new temporary directory)
#   WEIR_PROJECT      the compose project name (default weir)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/deploy/containers/containers.conf}"
for image in localhost/weir:dev localhost/weir-etcd:dev localhost/weir-s3:dev; do
  podman image exists "$image" || { scripts/image.sh >&2; break; }
done

dir="${WEIR_CLUSTER_DIR:-$(mktemp -d /tmp/weir-compose-XXXXXX)}"
project="${WEIR_PROJECT:-weir}"
mkdir -p "$dir/secrets" "$dir/out"

# One CA, one member certificate for every member (their service names, and 127.0.0.1 for the host's client),
# and the clients' token. The key is readable by the containers' user (uid 10001) only.
if [ ! -f "$dir/secrets/member.crt" ]; then
  (
    cd "$dir/secrets"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=Weir compose CA" -out ca.crt 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out member.key 2>/dev/null
    openssl req -new -key member.key -subj "/CN=weir-member" -out member.csr 2>/dev/null
    san="DNS:localhost,IP:127.0.0.1,DNS:jobmanager1,DNS:jobmanager2,DNS:taskmanager1,DNS:taskmanager2,DNS:taskmanager3"
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > ext.cnf
    openssl x509 -req -in member.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -sha256 \
      -extfile ext.cnf -out member.crt 2>/dev/null
    rm -f member.csr ext.cnf ca.srl ca.key
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > client-token
    chmod 0644 ca.crt member.crt
    chmod 0600 member.key
    chmod 0640 client-token
  )
  if [ "$(id -u)" -eq 0 ]; then
    chown 10001:10001 "$dir/secrets/member.key" "$dir/secrets/client-token" "$dir/out"
  else
    chmod 0644 "$dir/secrets/member.key" "$dir/secrets/client-token"; chmod 0777 "$dir/out"
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Started again in the same directory (an upgrade that recreates the containers), the cluster keeps its ports.
if [ -f "$dir/cluster.env" ]; then set -a; . "$dir/cluster.env"; set +a; fi
export WEIR_SECRETS="$dir/secrets" WEIR_OUT="$dir/out"
export WEIR_JM1_PORT="${WEIR_JM1_PORT:-$(free_port)}" WEIR_JM2_PORT="${WEIR_JM2_PORT:-$(free_port)}"
export WEIR_S3_PORT="${WEIR_S3_PORT:-$(free_port)}"
printf 'WEIR_SECRETS=%s\nWEIR_OUT=%s\nWEIR_JM1_PORT=%s\nWEIR_JM2_PORT=%s\nWEIR_S3_PORT=%s\n' \
  "$WEIR_SECRETS" "$WEIR_OUT" "$WEIR_JM1_PORT" "$WEIR_JM2_PORT" "$WEIR_S3_PORT" > "$dir/cluster.env"
echo "$project" > "$dir/project"

compose() { podman-compose -p "$project" -f "$root/deploy/compose.yaml" "$@"; }
# etcd and the store first: a job manager that cannot reach its checkpoint store at start exits.
compose up -d etcd1 etcd2 etcd3 s3 >"$dir/compose-up.log" 2>&1 || { tail -30 "$dir/compose-up.log" >&2; exit 1; }

# The checkpoint bucket (moto accepts an unsigned PUT; it answers 200 for one that exists).
deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null -X PUT "http://127.0.0.1:$WEIR_S3_PORT/weir" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || { echo "cluster-up: the S3 store did not answer in 60 s" >&2; exit 1; }
  sleep 0.5
done

compose up -d >>"$dir/compose-up.log" 2>&1 || { tail -30 "$dir/compose-up.log" >&2; exit 1; }

# Ready: a leader that sees three task managers.
weir_bin="${WEIR_BIN_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}/release}/weir"
jms="https://127.0.0.1:$WEIR_JM1_PORT,https://127.0.0.1:$WEIR_JM2_PORT"
deadline=$((SECONDS + 120))
until WEIR_TLS_CA="$dir/secrets/ca.crt" WEIR_TOKEN_FILE="$dir/secrets/client-token" \
    "$weir_bin" --jobmanager "$jms" cluster 2>/dev/null | grep -q '^3 task managers'; do
  if [ $SECONDS -ge $deadline ]; then
    echo "cluster-up: no job manager leading three task managers after 120 s" >&2
    podman ps -a --filter "label=io.podman.compose.project=$project" >&2
    exit 1
  fi
  sleep 1
done
printf '{"jobmanagers": ["https://127.0.0.1:%s", "https://127.0.0.1:%s"], "token_file": "%s", "ca_file": "%s", "out_dir": "%s", "project": "%s"}\n' \
  "$WEIR_JM1_PORT" "$WEIR_JM2_PORT" "$dir/secrets/client-token" "$dir/secrets/ca.crt" "$dir/out" "$project"
