#!/usr/bin/env bash
# Removes everything scripts/cluster-up.sh started: the compose project's containers, network and volumes
# (`cluster-down.sh DIR`, DIR the cluster directory it used; without DIR, the project `weir`). The images stay.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/containers/containers.conf}"
dir="${1:-}"
project="${WEIR_PROJECT:-weir}"
if [ -n "$dir" ] && [ -f "$dir/cluster.env" ]; then
  set -a; . "$dir/cluster.env"; set +a
  project=$(cat "$dir/project")
else
  export WEIR_SECRETS=/nonexistent WEIR_OUT=/nonexistent WEIR_JM1_PORT=0 WEIR_JM2_PORT=0 WEIR_S3_PORT=0
fi
podman-compose -p "$project" -f deploy/compose.yaml down -v >/dev/null 2>&1 || true
# Whatever compose did not remove (a container it lost track of).
podman ps -aq --filter "label=io.podman.compose.project=$project" | xargs -r podman rm -f >/dev/null 2>&1 || true
podman network ls -q --filter "label=io.podman.compose.project=$project" | xargs -r podman network rm -f >/dev/null 2>&1 || true
