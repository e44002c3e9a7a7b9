#!/usr/bin/env bash
# Installs the Node.js binary of tools/node.env for one architecture from the
# npm registry's node-linux-<arch> package, after checking the package's
# sha512 against the pinned integrity (not only the registry's own word).
#
#   tools/fetch-node.sh ARCH DEST     # ARCH: x64 | arm64; DEST gets bin/node and LICENSE
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=node.env
. "$here/node.env"
arch="$1" dest="$2"
case "$arch" in x64|arm64) ;; *) echo "fetch-node: unknown arch '$arch' (x64, arm64)" >&2; exit 2 ;; esac
want_var="KPR_NODE_INTEGRITY_$arch"; want="${!want_var}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
pkg="node-linux-$arch@$KPR_NODE_VERSION"
echo "fetch-node: $pkg → $dest" >&2
# npm pack runs no install scripts and reaches only the registry.
tgz="$(cd "$tmp" && npm pack --silent "$pkg")"
got="sha512-$(openssl dgst -sha512 -binary "$tmp/$tgz" | base64 -w0)"
if [ "$got" != "$want" ]; then
  echo "fetch-node: $pkg integrity $got, expected $want (tools/node.env)" >&2
  exit 1
fi
tar -xzf "$tmp/$tgz" -C "$tmp" package/bin/node package/LICENSE
rm -rf "$dest.tmp"; mkdir -p "$dest.tmp/bin"
mv "$tmp/package/bin/node" "$dest.tmp/bin/node"
mv "$tmp/package/LICENSE" "$dest.tmp/LICENSE"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
