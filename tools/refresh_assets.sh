#!/usr/bin/env bash
# Refresh the JavaScript libraries the HTML report inlines, from the npm registry, at
# the pinned versions below; writes them with their licences into
# relaytrace/render/assets/. Run from the repository root; needs npm and tar.
set -euo pipefail
D3_HIERARCHY=3.1.3
assets="$(cd "$(dirname "$0")/.." && pwd)/relaytrace/render/assets"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "d3-hierarchy@${D3_HIERARCHY}" >/dev/null && tar xzf "d3-hierarchy-${D3_HIERARCHY}.tgz")
cp "$work/package/dist/d3-hierarchy.min.js" "$assets/d3-hierarchy.min.js"
cp "$work/package/LICENSE" "$assets/d3-hierarchy.LICENSE"
echo "d3-hierarchy ${D3_HIERARCHY} -> $assets"
