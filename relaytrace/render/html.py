"""One self-contained HTML file: summary, kernel graph (inline SVG), sortable and
searchable tables; clicking a layer highlights its kernels, and the reverse.

No network: the data is inline JSON, the script and styles are inline too.
"""

from __future__ import annotations

import html
import json

from . import graphviz as G

_STYLE = """
body{font-family:Helvetica,Arial,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.1em;margin-top:1.6em}
.summary{color:#555;margin-bottom:1em}
table{border-collapse:collapse;font-size:12px;margin-bottom:1em}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f5f8;cursor:pointer;user-select:none} th.sorted::after{content:" \\25BE"}
tr.hl td{background:#ffe9a8} tr.pick td{background:#ffd04d}
tbody tr:hover td{background:#f6f8ff;cursor:pointer}
#search{font-size:14px;padding:4px 8px;width:24em;margin:.5em 0}
.graph{border:1px solid #ddd;overflow:auto;max-height:640px}
.graph g.hl > polygon,.graph g.hl > path{stroke:#e6a100;stroke-width:4px}
.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b00020;font-weight:bold} .warn{color:#8a5a00;font-weight:bold} .good{color:#1b6e20}
"""

_SCRIPT = r"""
const data = JSON.parse(document.getElementById('relaytrace-data').textContent);
const tables = {};
function cell(v){ return (typeof v === 'number') ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : (Array.isArray(v) ? v.join(', ') : String(v)); }
function build(id, columns, rows, keyOf){
  const table = document.getElementById(id);
  const head = table.createTHead().insertRow();
  columns.forEach((c, i) => { const th = document.createElement('th'); th.textContent = c[0];
    th.onclick = () => sortBy(id, i); head.appendChild(th); });
  const body = table.createTBody();
  rows.forEach(r => { const tr = body.insertRow(); tr.dataset.key = keyOf(r);
    columns.forEach(c => { const td = tr.insertCell(); const v = r[c[1]]; td.textContent = cell(v);
      if (typeof v === 'number') td.className = 'num'; });
    tr.dataset.text = tr.textContent.toLowerCase(); tr.onclick = () => pick(id, r); });
  tables[id] = {columns, body, asc: {}};
}
function sortBy(id, i){
  const t = tables[id], rows = Array.from(t.body.rows), asc = !t.asc[i]; t.asc = {}; t.asc[i] = asc;
  const val = tr => { const s = tr.cells[i].textContent, n = parseFloat(s); return isNaN(n) || /[a-z]/i.test(s.replace(/e[-+]?\d+$/,'')) ? s : n; };
  rows.sort((a, b) => { const x = val(a), y = val(b); return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
  rows.forEach(r => t.body.appendChild(r));
  document.querySelectorAll('#' + id + ' th').forEach((th, j) => th.classList.toggle('sorted', j === i));
}
function clear(){ document.querySelectorAll('tr.hl,tr.pick').forEach(r => r.classList.remove('hl', 'pick'));
  document.querySelectorAll('.graph g.hl').forEach(g => g.classList.remove('hl')); }
function mark(id, keys){ Array.from(tables[id].body.rows).forEach(tr => { if (keys.has(tr.dataset.key)) tr.classList.add('hl'); }); }
function markSites(sites){ sites.forEach(s => { const g = document.getElementById('site:' + s); if (g) g.classList.add('hl'); }); }
function pick(id, r){
  clear();
  const row = Array.from(tables[id].body.rows).find(tr => tr.dataset.key === tables[id].keyOf(r));
  if (row) row.classList.add('pick');
  if (id === 'layers'){ const sites = data.layer_sites[r.layer] || [];
    mark('kernels', new Set(sites.map(s => s.split('#')[0]))); markSites(sites); }
  if (id === 'kernels'){ mark('layers', new Set(r.layers)); markSites(data.kernel_sites[r.name] || []); }
}
function search(q){ q = q.toLowerCase();
  Object.values(tables).forEach(t => Array.from(t.body.rows).forEach(tr => {
    tr.style.display = !q || tr.dataset.text.includes(q) ? '' : 'none'; })); }
build('layers', [['layer','layer'],['time (ms)','ms'],['%','percent'],['inserted (ms)','inserted_ms'],['ops','ops'],['kernel calls','sites'],['verification','status']], data.layers, r => r.layer);
build('kernels', [['Name','name'],['Duration (us, median)','us'],['min','min_us'],['max','max_us'],['Percent','percent'],['Count','count'],['Device','device'],['Argument Shapes','shapes'],['Layers','layers'],['verification','status']], data.kernels, r => r.name);
if (data.checks.length){
  build('checks', [['call site','site'],['verdict','status'],['reasons','reasons']], data.checks, r => r.site);
  tables.checks.keyOf = r => r.site; }
build('optypes', [['op type','op'],['time (ms)','ms'],['%','percent'],['count','count'],['layers','layers']], data.op_types, r => r.op);
build('categories', [['category','name'],['time (ms)','ms'],['% of end-to-end','percent']], data.categories, r => r.name);
tables.layers.keyOf = r => r.layer; tables.kernels.keyOf = r => r.name;
tables.optypes.keyOf = r => r.op; tables.categories.keyOf = r => r.name;
document.getElementById('search').oninput = e => search(e.target.value);
document.querySelectorAll('.graph g.node').forEach(g => { if (g.id.startsWith('site:')) g.onclick = () => {
  const site = g.id.slice(5); const row = data.kernels.find(k => k.name === site.split('#')[0]); if (row) pick('kernels', row); }; });
"""


def report_data(report) -> dict:
    lineage = report.lineage
    checks = lineage.site_checks()
    layer_sites: dict[str, list[str]] = {}
    for s in lineage.call_sites:
        for o in s.origin_ids:
            origin = lineage.origins[o]
            for layer in [origin.layer] + [lineage.origins[x].layer for x in origin.serves]:
                layer_sites.setdefault(layer, [])
                if s.label not in layer_sites[layer]:
                    layer_sites[layer].append(s.label)
    return {
        "layers": [{"layer": r.layer, "ms": r.us / 1e3, "percent": r.percent, "inserted_ms": r.inserted_us / 1e3,
                    "ops": list(r.ops), "sites": list(r.kernels), "status": r.status} for r in report.layers],
        "kernels": [{"name": r.name, "us": r.us, "min_us": r.min_us, "max_us": r.max_us, "percent": r.percent,
                     "count": r.count, "device": r.device,
                     "shapes": r.shapes, "layers": list(r.layers), "status": r.status} for r in report.kernels],
        "checks": [{"site": s.label, "status": checks[s.position].status,
                    "reasons": "; ".join(checks[s.position].reasons)}
                   for s in lineage.call_sites if checks[s.position].status != "verified"],
        "op_types": [{"op": r.op, "ms": r.us / 1e3, "percent": r.percent, "count": r.count, "layers": r.layers}
                     for r in report.op_types],
        "categories": [{"name": n, "ms": us / 1e3, "percent": p} for n, us, p in report.categories.rows()],
        "layer_sites": layer_sites,
        "kernel_sites": {k: [s.label for s in v] for k, v in lineage.kernels.items()},
    }


def html_report(report) -> str:
    """The report page of a ``Report``: one self-contained HTML file."""
    lineage, profile, policy, cats = report.lineage, report.profile, report.policy, report.categories
    data = report_data(report)
    svg = G.kernel_graph(lineage, report).pipe(format="svg").decode()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype
    caused = ", ".join(f"{html.escape(layer)} ({us / 1e3:.3f} ms)" for layer, us in cats.inserted_by_layer[:6])
    payload = json.dumps(data).replace("</", "<\\/")
    cov = report.coverage
    verdict = (f"{cov.verified_sites} of {cov.call_sites} call sites verified against the compiled IR; "
               f"{len(cov.suspect)} suspect, {len(cov.unverified)} unverified"
               + ("" if not (cov.suspect or cov.unverified) else
                  f": {(cats.suspect_us + cats.unverified_us) / 1e3:.3f} ms ran there, and may be billed "
                  f"to the wrong layers below"))
    verdict_class = "bad" if cov.suspect or cov.problems else "warn" if cov.unverified else "good"
    problems = "".join(f"<p class=\"bad\">{html.escape(p)}</p>" for p in cov.problems)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>relaytrace: {html.escape(lineage.model)}</title><style>{_STYLE}</style></head>
<body>
<h1>relaytrace: {html.escape(lineage.model)}</h1>
<div class="summary">target {html.escape(lineage.target)} &middot; pipeline {html.escape(lineage.pipeline)}
&middot; entry {html.escape(profile.entry)}{_inputs(profile)} &middot; {html.escape(profile.summary())}<br>
{len(lineage.call_sites)} kernel call sites of {len(lineage.kernels)} kernels &middot; attribution policy {policy}
{"<br>ops inserted by passes (layout transforms, casts, shape functions) serve: " + caused if caused else ""}</div>
{"".join(f'<p class="warn">{html.escape(w)}</p>' for w in profile.warnings())}
<input id="search" type="search" placeholder="search layers, kernels, ops">
<h2>Categories</h2><table id="categories"></table>
<h2>Verification</h2><p class="{verdict_class}">{html.escape(verdict)}</p>{problems}
{'<table id="checks"></table>' if data["checks"] else ""}
<h2>Layers</h2><p>Click a layer to highlight its kernels (table and graph).</p><table id="layers"></table>
<h2>Kernels</h2><p>Click a kernel to highlight the layers it runs.</p><table id="kernels"></table>
<h2>Op types</h2><table id="optypes"></table>
<h2>Kernel graph</h2><div class="graph">{svg}</div>
<script type="application/json" id="relaytrace-data">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def _inputs(profile) -> str:
    """The concrete input shapes a profile ran, for the header."""
    if not profile.inputs:
        return ""
    shown = ", ".join(f"{n} {d}{list(sh)}" for n, sh, d in profile.inputs[:2])
    more = f", +{len(profile.inputs) - 2} more inputs" if len(profile.inputs) > 2 else ""
    return " (" + html.escape(shown + more) + ")"
