#!/usr/bin/env bash
# Builds Weir's container image, localhost/weir:dev, from scratch on a fresh Debian machine (no registry is
# needed): a slim bookworm root made with debootstrap from the configured apt mirror and imported as
# localhost/weir-base:bookworm (once; about 3 minutes), then deploy/Containerfile over it with the stripped
# release binaries. Also builds the compose cluster's helper images: localhost/weir-etcd:dev (Debian's etcd) and
# localhost/weir-s3:dev (moto's S3 server). `image.sh --rebase` makes the bases again.
# Prints the image's size as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

rebase=false
[ "${1:-}" = "--rebase" ] && rebase=true

scripts/setup.sh
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/containers/containers.conf}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

work=$(mktemp -d)
trap '$SUDO rm -rf "$work"' EXIT

# The apt mirror this machine is configured with (deb822 or one-line sources).
mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '/^deb / { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

if $rebase || ! podman image exists localhost/weir-base:bookworm || ! podman image exists localhost/weir-base-python:bookworm; then
  echo "image: debootstrap bookworm from $mirror (a few minutes)" >&2
  if ! $SUDO debootstrap --variant=minbase --include=tini,ca-certificates,python3-minimal,libpython3.11-stdlib \
      bookworm "$work/full" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    echo "image: debootstrap failed (log above)" >&2
    exit 1
  fi
  # The slim root: only the files of the packages the binaries and tini need, the top-level links of the
  # merged /usr, the CA bundle, and the user weir (uid 10001) owning /var/lib/weir.
  slim() {
    local root=$1; shift
    local info="$work/full/var/lib/dpkg/info"
    $SUDO mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
    for l in bin lib lib64 sbin; do $SUDO cp -a "$work/full/$l" "$root/"; done
    for p in "$@"; do cat "$info/$p.list" "$info/$p:amd64.list" 2>/dev/null || true; done \
      | sort -u | sed 's|^/||' | grep -v '^$' > "$work/files"
    (cd "$work/full" && $SUDO tar -cf - --no-recursion -T "$work/files" 2>/dev/null) | (cd "$root" && $SUDO tar -xf -)
    $SUDO mkdir -p "$root/etc/ssl" "$root/tmp" "$root/var/lib/weir" "$root/etc/weir"
    $SUDO cp -a "$work/full/etc/ssl/certs" "$root/etc/ssl/"
    $SUDO chmod 1777 "$root/tmp"
    printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nweir:x:10001:10001:weir:/var/lib/weir:/usr/sbin/nologin\n' \
      | $SUDO tee "$root/etc/passwd" >/dev/null
    printf 'root:x:0:\nweir:x:10001:\n' | $SUDO tee "$root/etc/group" >/dev/null
    printf 'hosts: files dns\n' | $SUDO tee "$root/etc/nsswitch.conf" >/dev/null
    $SUDO chown 10001:10001 "$root/var/lib/weir"
  }
  runtime=(libc6 libgcc-s1 libstdc++6 tini ca-certificates)
  slim "$work/base" "${runtime[@]}"
  # The S3 store's base is the whole minbase root with python3 (its size does not matter: a test helper).
  $SUDO chroot "$work/full" /usr/sbin/useradd --uid 10001 --user-group --home-dir /var/lib/weir --create-home \
    --shell /usr/sbin/nologin weir
  $SUDO tar -C "$work/base" -c . | podman import --quiet - localhost/weir-base:bookworm >/dev/null
  $SUDO tar -C "$work/full" -c . | podman import --quiet - localhost/weir-base-python:bookworm >/dev/null
fi

echo "image: building the release binaries" >&2
cargo build --release --quiet -p weir-jobmanager -p weir-taskmanager -p weir-cli --bins
ctx="$work/context"
mkdir -p "$ctx"
for b in weir weir-jobmanager weir-taskmanager; do
  objcopy --strip-all "$CARGO_TARGET_DIR/release/$b" "$ctx/$b"
done
podman build --quiet --format docker -f deploy/Containerfile -t localhost/weir:dev "$ctx" >/dev/null

# The compose cluster's etcd and S3 store.
etcd_ctx="$work/etcd"
mkdir -p "$etcd_ctx"
cp /usr/bin/etcd "$etcd_ctx/etcd"
podman build --quiet --format docker -f deploy/containers/etcd.Containerfile -t localhost/weir-etcd:dev "$etcd_ctx" >/dev/null
if $rebase || ! podman image exists localhost/weir-s3:dev; then
  s3_ctx="$work/s3"
  mkdir -p "$s3_ctx"
  # Debian's python3 makes the venv, so that the image's python3 (the same package) runs it at the same path.
  /usr/bin/python3 -m venv "$s3_ctx/moto"
  "$s3_ctx/moto/bin/pip" install -q --disable-pip-version-check 'moto[server]==5.*' >/dev/null
  grep -rlI --exclude-dir=__pycache__ "$s3_ctx/moto" "$s3_ctx/moto/bin" | xargs -r sed -i "s|$s3_ctx/moto|/opt/moto|g"
  podman build --quiet --format docker -f deploy/containers/s3.Containerfile -t localhost/weir-s3:dev "$s3_ctx" >/dev/null
fi

size=$(podman image inspect localhost/weir:dev --format '{{.Size}}')
echo "localhost/weir:dev $((size / 1000000)) MB"
