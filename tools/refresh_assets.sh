#!/usr/bin/env bash
# Refresh the JavaScript libraries the HTML report inlines, from the npm registry, at
# the pinned versions below; writes them with their licences into
# relaytrace/render/assets/ (source-map comments dropped: the maps are not shipped).
# Run from the repository root; needs npm and tar.
set -euo pipefail
D3_HIERARCHY=3.1.3
DAGRE=3.1.3  # @dagrejs/dagre; its dist bundle includes @dagrejs/graphlib
assets="$(cd "$(dirname "$0")/.." && pwd)/relaytrace/render/assets"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
vendor() {  # npm package, version, file in the package, name in assets
  rm -rf "$work/package"
  (cd "$work" && tar xzf "$(npm pack --silent "$1@$2")")
  grep -v '^//# sourceMappingURL=' "$work/package/$3" > "$assets/$4.min.js"
  cp "$work/package/LICENSE" "$assets/$4.LICENSE"
  echo "$1 $2 -> $assets/$4.min.js"
}
vendor d3-hierarchy "$D3_HIERARCHY" dist/d3-hierarchy.min.js d3-hierarchy
vendor @dagrejs/dagre "$DAGRE" dist/dagre.min.js dagre
