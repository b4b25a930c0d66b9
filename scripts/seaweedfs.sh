#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (a real S3 server, Apache-2.0) from the Go module proxy once, and
# prints the path of the cached binary. The cache lives outside the clone
# (${MILLRACE_CACHE:-$HOME/.cache/millrace}), so a fresh clone pays the ~9-minute build once per
# machine. Used by the tiered-storage tests, the fault harness and the benchmarks.
set -euo pipefail
VERSION="${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
CACHE="${MILLRACE_CACHE:-$HOME/.cache/millrace}/seaweedfs/$VERSION"
BIN="$CACHE/weed"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A throwaway module so `go mod download` has somewhere to resolve from.
(cd "$work" && go mod init seaweedfs-build >/dev/null 2>&1 &&
  go mod download github.com/seaweedfs/seaweedfs@"$VERSION")
dir="$(cd "$work" && go mod download -json github.com/seaweedfs/seaweedfs@"$VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
echo "building SeaweedFS $VERSION (about 9 minutes on 2 cores) ..." >&2
start=$SECONDS
(cd "$dir/weed" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$work/weed" .) >&2
mv "$work/weed" "$BIN"
echo "built SeaweedFS in $((SECONDS - start)) s" >&2
echo "$BIN"
