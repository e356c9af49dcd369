// The report page. Every name in the data (layer, kernel, call site, op, source, the
// model) is data: the page is built of DOM nodes, names go in as text nodes and
// attribute values (never parsed as markup), and whatever is looked up by a name is a Map.
const data = JSON.parse(document.getElementById('relaytrace-data').textContent);
const layerSites = new Map(data.layer_sites);    // layer -> the ids of the call sites running or serving it (data.sites[id])
const layerDetail = new Map(data.layer_detail);  // layer -> {ops, source}
const layerErrors = new Map(data.errors);        // layer -> {status, text}: its numerical comparison
data.sites.forEach(s => { s.roles = new Map(s.roles); });  // layer -> its role at the site
const tables = new Map();  // table id -> {body, keyOf, sorted}

/** An HTML element: attributes set as values (never parsed), then the children, each a
    node or a string (a text node). */
function h(tag, attrs, ...children){
  const e = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
  e.append(...children.filter(c => c !== null));
  return e;
}
const SVGNS = 'http://www.w3.org/2000/svg';
/** An SVG element with attributes set as values, appended to parent when given. */
function el(tag, attrs, parent){ const e = document.createElementNS(SVGNS, tag);
  Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, v)); if (parent) parent.appendChild(e); return e; }

// ---- the sortable, searchable tables ----
/** Fill table `id`: a header of columns ([title, field]), a row per item of rows, keyed
    (tr.dataset.key) by keyOf(row); a click on a row picks it. */
function build(id, columns, rows, keyOf){
  const table = document.getElementById(id);
  const head = table.createTHead().insertRow();
  columns.forEach((c, i) => { const th = h('th', null, c[0]); th.onclick = () => sortBy(id, i); head.appendChild(th); });
  const body = table.createTBody();
  rows.forEach(r => { const tr = body.insertRow(); tr.dataset.key = keyOf(r);
    columns.forEach(c => { const td = tr.insertCell(); const v = r[c[1]]; td.textContent = cell(v); td.dataset.col = c[1];
      if (typeof v === 'number') td.className = 'num'; });
    tr.dataset.text = tr.textContent.toLowerCase(); tr.onclick = () => pick(id, r); });
  tables.set(id, {body, keyOf, sorted: null});
}
/** Sort table id by column i, ascending unless it was sorted so already; numbers as numbers. */
function sortBy(id, i){
  const t = tables.get(id), rows = Array.from(t.body.rows);
  const asc = !(t.sorted && t.sorted.column === i && t.sorted.asc); t.sorted = {column: i, asc};
  const val = tr => { const s = tr.cells[i].textContent, n = parseFloat(s); return isNaN(n) || /[a-z]/i.test(s.replace(/e[-+]?\d+$/,'')) ? s : n; };
  rows.sort((a, b) => { const x = val(a), y = val(b); return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
  rows.forEach(r => t.body.appendChild(r));
  document.getElementById(id).querySelectorAll('th').forEach((th, j) => th.classList.toggle('sorted', j === i));
}
function clear(){ document.querySelectorAll('tr.hl,tr.pick').forEach(r => r.classList.remove('hl', 'pick'));
  document.querySelectorAll('#graph g.hl').forEach(g => g.classList.remove('hl')); }
/** Highlight the rows of table id whose keys are in the Set keys. */
function mark(id, keys){ Array.from(tables.get(id).body.rows).forEach(tr => { if (keys.has(tr.dataset.key)) tr.classList.add('hl'); }); }
/** Row r of table id picked: it and what it runs (a layer's kernels, a kernel's layers) highlighted. */
function pick(id, r){
  clear();
  const t = tables.get(id), key = t.keyOf(r);
  const row = Array.from(t.body.rows).find(tr => tr.dataset.key === key);
  if (row) row.classList.add('pick');
  if (id === 'layers'){
    mark('kernels', new Set((layerSites.get(r.layer) || []).map(id => data.sites[id].kernel)));
    markLayers([r.layer]); }
  if (id === 'kernels'){ mark('layers', new Set(r.layers)); markLayers(r.layers); }
}
function search(q){ q = q.toLowerCase();
  tables.forEach(t => Array.from(t.body.rows).forEach(tr => {
    tr.style.display = !q || tr.dataset.text.includes(q) ? '' : 'none'; }));
  findInGraph(q); }
const precisionOf = new Map(data.precision.layers);  // layer -> {label, dtype, kind, why, cast_ms}
data.layers.forEach(l => { const p = precisionOf.get(l.layer); l.precision = p ? p.label : ''; });
build('layers', [['layer','layer'],['time (ms)','ms'],['%','percent'],['inserted (ms)','inserted_ms'],['ops','ops'],['kernel calls','sites'],['verification','status'],['precision','precision']], data.layers, r => r.layer);
build('kernels', [['Name','name'],['Duration (us, median)','us'],['min','min_us'],['max','max_us'],['Percent','percent'],['Count','count'],['Device','device'],['Argument Shapes','shapes'],['Layers','layers'],['library','library'],['verification','status']], data.kernels, r => r.name);
if (data.checks.length) build('checks', [['call site','site'],['verdict','status'],['reasons','reasons']], data.checks, r => r.site);
build('optypes', [['op type','op'],['time (ms)','ms'],['%','percent'],['count','count'],['layers','layers']], data.op_types, r => r.op);
build('roof', [['layer','layer'],['time (ms)','ms'],['above bound (ms)','wasted_ms'],['efficiency (%)','efficiency'],['bound by','bound_by'],['GFLOP','gflop'],['useful GFLOP','useful_gflop'],['GFLOP/s','gflops_s'],['model GFLOP/s','model_gflops_s'],['GB/s','gbytes_s'],['FLOP/byte','intensity'],['executed beyond useful','excess']], data.roofline.layers, r => r.layer);
if (data.inside.length) build('inside', [['call site','site'],['ops','ops'],['layers','layers'],['blocks','blocks'],['median us','us'],['min','min_us'],['max','max_us'],['measured %','measured_percent'],['modelled %','modelled_percent'],['differs','differs']], data.inside, r => r.key);
build('categories', [['category','name'],['time (ms)','ms'],['% of end-to-end','percent']], data.categories, r => r.name);
document.getElementById('search').oninput = e => search(e.target.value);

// ---- precision: the build's, time by compute dtype, the casts' share; the layers table's cells coloured ----
const PRECISION = new Map([['half', 'computes in a half dtype'], ['reads-half', 'reads a half dtype, computes wider'],
  ['kept', 'left in float32 by the float16 build'], ['float32', 'float32'], ['cast', 'casts only']]);
function drawPrecision(){
  const p = data.precision, line = document.getElementById('precision');
  const dtypes = p.by_dtype.map(([d, ms, pc]) => `${d} ${ms.toFixed(3)} ms (${pc.toFixed(1)}%)`).join(', ');
  line.replaceChildren(`${p.build}; time by compute dtype: ${dtypes || 'none'}; ${p.casts} cast(s): ` +
    `${p.cast_ms.toFixed(3)} ms, ${p.cast_percent.toFixed(2)}% of kernel time`);
  if (p.mixed) line.append(h('br'), ...Array.from(PRECISION, ([kind, words]) =>
    h('span', {class: 'dtype ' + kind}, words)));
  const column = Array.from(document.querySelectorAll('#layers thead th')).findIndex(th => th.textContent === 'precision');
  Array.from(tables.get('layers').body.rows).forEach(tr => { const q = precisionOf.get(tr.dataset.key);
    if (!q || column < 0) return;
    const td = tr.cells[column]; td.classList.add('dtype', q.kind); if (q.why) td.title = q.why; });
}
/** A layer's precision in words, for its pane (null without). */
function precisionLine(name){
  const q = precisionOf.get(name); if (!q) return null;
  return h('p', {class: 'dtype ' + q.kind}, `precision: ${q.label}` + (q.cast_ms ? `; casts billed to it ${q.cast_ms.toFixed(3)} ms` : '') +
    (q.why ? `; left in float32: ${q.why}` : ''));
}
drawPrecision();

// ---- where the time goes: an icicle over the module hierarchy (d3-hierarchy) ----
const COLOURS = new Map([['compute', '#4e79a7'], ['inserted', '#f28e2b'], ['unresolved', '#e15759'],
  ['builtin', '#9c755f'], ['gap', '#bab0ac']]);
/** The module tree of the layers (split at '.'), for d3.hierarchy: each node {name (its
    module path), children, layer}, a layer's own time as leaves {part, value}; the root
    (model: true) is the model. */
function hierarchyOf(){
  const root = {name: data.model, children: new Map()};
  data.layers.forEach(l => { let node = root;
    l.layer.split('.').forEach((part, i, parts) => {
      if (!node.children.has(part)) node.children.set(part, {name: parts.slice(0, i + 1).join('.'), children: new Map()});
      node = node.children.get(part); });
    node.compute = (node.compute || 0) + (l.ms - l.inserted_ms); node.inserted = (node.inserted || 0) + l.inserted_ms;
    node.layer = l.layer; });
  const plain = n => { const kids = Array.from(n.children.values()).map(plain);
    const own = [];
    if (n.compute) own.push({name: n.name, part: 'compute', value: n.compute, layer: n.layer});
    if (n.inserted) own.push({name: n.name + ' (inserted)', part: 'inserted', value: n.inserted, layer: n.layer});
    if (!kids.length) return own.length === 1 ? own[0] : {name: n.name, children: own, layer: n.layer};
    return {name: n.name, children: kids.concat(own), layer: n.layer}; };
  return Object.assign(plain(root), {model: true});
}
let icicleRoot = null;
/** Draw the icicle of the subtree focus (null: the whole model) and its breadcrumbs. */
function drawIcicle(focus){
  const svg = document.getElementById('icicle'); svg.replaceChildren();
  const width = svg.clientWidth || 900, rowH = 22;
  const root = d3.hierarchy(focus || icicleRoot.data).sum(d => d.children ? 0 : d.value).sort((a, b) => b.value - a.value);
  d3.partition().size([width, (root.height + 1) * rowH])(root);
  svg.setAttribute('height', (root.height + 1) * rowH + 2);
  root.descendants().forEach(d => {
    const w = d.x1 - d.x0; if (w < 0.5) return;
    const g = el('g', {}, svg);
    const part = d.data.part || (d.children ? null : 'compute');
    const rect = el('rect', {x: d.x0, y: d.y0, width: w, height: d.y1 - d.y0,
      fill: part ? COLOURS.get(part) : '#8fb0d8', 'data-name': d.data.name}, g);
    el('title', {}, rect).textContent = `${d.data.name}: ${d.value.toFixed(3)} ms`;
    if (w > 60) el('text', {x: d.x0 + 4, y: d.y0 + 14}, g).textContent =
      `${d.depth ? d.data.name.split('.').pop() : d.data.name} ${d.value.toFixed(3)} ms`;
    rect.onclick = () => {
      if (!d.children && d.data.layer) return showLayer(d.data.layer);
      if (d.children && d !== root) drawIcicle(d.data); else if (d === root && focus) drawIcicle(null);
      showModule(d.data.model ? null : d.data.name); };
  });
  const top = h('a', null, data.model); top.onclick = () => drawIcicle(null);
  document.getElementById('crumbs').replaceChildren(top,
    focus ? ` / ${focus.name} (click the top bar to go up)` : '');
}
/** The pane of module name (a layer path prefix; null: the whole model): its layers and their kernel calls. */
function showModule(name){
  const layers = data.layers.filter(l => name === null || l.layer === name || l.layer.startsWith(name + '.'));
  const sites = new Set(); layers.forEach(l => (layerSites.get(l.layer) || []).forEach(s => sites.add(s)));
  const total = layers.reduce((a, l) => a + l.ms, 0);
  detail(`module ${name === null ? data.model : name}`, [
    h('p', null, `${total.toFixed(3)} ms in ${layers.length} layer(s), ${sites.size} kernel call site(s)`),
    table(['layer', 'ms', 'kernel calls'], layers.slice(0, 60).map(l => [layerLink(l.layer), l.ms.toFixed(3), l.sites.join(' ')])),
  ]);
}

// ---- one run, site by site ----
function drawTimeline(){
  const svg = document.getElementById('timeline'); svg.replaceChildren();
  const width = svg.clientWidth || 900, ht = 26, lane = data.inside.length ? 16 : 0;
  const end = data.sites.reduce((a, s) => Math.max(a, s.start_us + s.us), 0) || 1;
  svg.setAttribute('height', ht + lane + 18);
  const inside = new Map();  // site id -> its ops as timed inside (profile --inside), in part order
  data.inside.forEach(r => { if (!inside.has(r.site_id)) inside.set(r.site_id, []); inside.get(r.site_id).push(r); });
  data.sites.forEach(s => {
    const x = s.start_us / end * width, w = Math.max(s.us / end * width, 0.5);
    const rect = el('rect', {x, y: 2, width: w, height: ht, fill: COLOURS.get(s.category) || COLOURS.get('compute'),
      'data-site': s.id}, svg);
    el('title', {}, rect).textContent = `${s.label}: ${s.us.toFixed(1)} us (${s.layers.join(', ')})`;
    if (w > 70) el('text', {x: x + 3, y: 18}, svg).textContent = s.layers[0] || s.kernel;
    rect.onclick = () => showSite(s.id);
    let at = x;  // the kernel's slice cut by its parts' measured times (its ops', and the rest of the call), under it
    const rows = inside.get(s.id) || [], whole = rows.reduce((a, r) => a + r.us, 0) || 1;
    rows.forEach((r, i) => {
      const part = w * r.us / whole;
      const slice = el('rect', {x: at, y: ht + 3, width: Math.max(part, 0.3), height: lane - 2, class: 'inside',
        fill: i % 2 ? '#8fb8de' : '#3f7cbf', 'data-site': s.id}, svg);
      el('title', {}, slice).textContent = `${s.label}, inside: ${r.ops} (${r.layers}): ${r.measured_percent.toFixed(1)} % measured, ${r.modelled_percent.toFixed(1)} % modelled`;
      if (part > 50) el('text', {x: at + 2, y: ht + lane - 2, class: 'inside-label'}, svg).textContent = r.ops;
      slice.onclick = () => showSite(s.id);
      at += part;
    });
  });
  const nested = lane ? '; under each kernel timed inside (--inside), its ops by their measured shares' : '';
  el('text', {x: 2, y: ht + lane + 14}, svg).textContent = `0 .. ${(end / 1e3).toFixed(3)} ms: the kernel call sites of one run in order (${data.timeline_note})${nested}`;
}

// ---- the charts' frame: a plot area inside margins m, grid lines with their labels, axis titles ----
/** svg's frame: its width, height ht (set), margins m. */
function chartBox(svg, ht, m){ svg.setAttribute('height', ht); return {width: svg.clientWidth || 900, ht, m}; }
/** A vertical grid line at x, labelled under the plot. */
function xTick(svg, {ht, m}, x, label){ el('line', {x1: x, x2: x, y1: m.t, y2: ht - m.b, class: 'grid'}, svg);
  el('text', {x, y: ht - m.b + 14, 'text-anchor': 'middle'}, svg).textContent = label; }
/** A horizontal grid line at y, labelled left of the plot. */
function yTick(svg, {width, m}, y, label){ el('line', {x1: m.l, x2: width - m.r, y1: y, y2: y, class: 'grid'}, svg);
  el('text', {x: m.l - 4, y: y + 4, 'text-anchor': 'end'}, svg).textContent = label; }
function axisTitles(svg, {width, ht, m}, x, y){
  el('text', {x: (m.l + width) / 2, y: ht - 6, 'text-anchor': 'middle'}, svg).textContent = x;
  el('text', {x: 12, y: ht / 2, transform: `rotate(-90 12 ${ht / 2})`, 'text-anchor': 'middle'}, svg).textContent = y; }

// ---- the roofline: layers at their intensity and achieved rate, under both ceilings ----
const roofByLayer = new Map(data.roofline.layers.map(r => [r.layer, r]));
function drawRoofline(){
  const svg = document.getElementById('roofline'); svg.replaceChildren();
  const peaks = data.roofline.peaks;
  document.getElementById('peaks').textContent = peaks ? peaks.line :
    'No peak rates for this device (profile gives them with --peak-gflops and --peak-gbps, or --device): rates without ceilings.';
  const pts = data.roofline.layers.filter(r => r.gflops_s > 0 && r.intensity > 0);
  const box = chartBox(svg, 360, {l: 64, r: 16, t: 12, b: 40}), {width, ht, m} = box;
  if (!pts.length){ el('text', {x: 10, y: 20}, svg).textContent = 'no layer has counted work'; return; }
  // the compute ceilings of the dtypes the layers compute in (float32's, and float16's where a layer is)
  const used = new Set(pts.map(r => r.dtype));
  const ceilings = peaks ? peaks.gflops.filter(([dtype]) => dtype === 'float32' || used.has(dtype)) : [];
  const xs = pts.map(r => r.intensity), ys = pts.map(r => r.gflops_s);
  ceilings.forEach(([, g]) => { ys.push(g); xs.push(g / peaks.gbps); });
  const lo = v => Math.pow(10, Math.floor(Math.log10(Math.min(...v)))), hi = v => Math.pow(10, Math.ceil(Math.log10(Math.max(...v)) + 0.01));
  const x0 = lo(xs), x1 = hi(xs), y0 = lo(ys), y1 = hi(ys);
  const X = v => m.l + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (width - m.l - m.r);
  const Y = v => ht - m.b - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)) * (ht - m.t - m.b);
  for (let d = x0; d <= x1 * 1.001; d *= 10) xTick(svg, box, X(d), String(+d.toPrecision(3)));
  for (let d = y0; d <= y1 * 1.001; d *= 10) yTick(svg, box, Y(d), String(+d.toPrecision(3)));
  axisTitles(svg, box, 'arithmetic intensity (FLOP/byte)', 'achieved GFLOP/s');
  ceilings.forEach(([dtype, g]) => {
    const knee = g / peaks.gbps, from = Math.max(x0, y0 / peaks.gbps);
    el('path', {d: `M${X(from)},${Y(from * peaks.gbps)}L${X(knee)},${Y(g)}L${X(x1)},${Y(g)}`,
      class: 'ceiling' + (dtype === 'float32' ? '' : ' other')}, svg);
    el('text', {x: X(x1) - 4, y: Y(g) - 5, 'text-anchor': 'end', class: 'ceiling-label'}, svg).textContent =
      `${dtype} peak ${g.toFixed(1)} GFLOP/s`;
  });
  if (peaks){ const from = Math.max(x0, y0 / peaks.gbps);
    el('text', {x: X(from) + 6, y: Y(from * peaks.gbps) - 6, class: 'ceiling-label'}, svg).textContent = `${peaks.gbps.toFixed(1)} GB/s`; }
  const left = data.roofline.layers.length - pts.length;
  if (left) el('text', {x: m.l + 6, y: m.t + 12}, svg).textContent =
    `${left} layer(s) not drawn: no FLOPs (data movement) or no counted work`;
  const most = Math.max(...pts.map(r => r.ms), 1e-9);
  pts.slice().sort((a, b) => b.ms - a.ms).forEach(r => {
    const dot = el('circle', {cx: X(r.intensity), cy: Y(r.gflops_s), r: 2 + 14 * Math.sqrt(r.ms / most),
      class: 'dot ' + (r.bound_by || 'none'), 'data-layer': r.layer}, svg);
    el('title', {}, dot).textContent = `${r.layer}: ${r.ms.toFixed(3)} ms, ${sig(r.gflops_s)} GFLOP/s at ` +
      `${sig(r.intensity)} FLOP/byte (${r.dtype})` + (r.efficiency != null ? `, ${r.efficiency.toFixed(1)}% of its bound` : '');
    dot.onclick = () => showLayer(r.layer);
  });
}
/** A layer's roofline figures in words, for its pane (null when it has none). */
function roofLine(name){
  const r = roofByLayer.get(name); if (!r || r.gflop == null) return null;
  const bound = r.bound_ms != null ? `; its lower bound ${r.bound_ms.toFixed(3)} ms (${r.bound_by}-bound, ${r.dtype}), ` +
    `${sig(r.efficiency)}% efficient, ${r.wasted_ms.toFixed(3)} ms above it` : '';
  const useful = r.useful_gflop != null ? `, ${sig(r.useful_gflop)} GFLOP useful (what its own ops ask; ` +
    `${sig(r.model_gflops_s)} model GFLOP/s)` + (r.excess ? `; executed beyond useful: ${r.excess}` : '') : '';
  return h('p', {class: 'work'}, `work: ${sig(r.gflop)} GFLOP executed${useful}, at ${sig(r.intensity)} FLOP/byte, ` +
    `${sig(r.gflops_s)} GFLOP/s and ${sig(r.gbytes_s)} GB/s ${data.estimate ? 'at its bound (an estimate)' : 'achieved'}` +
    (data.estimate ? '' : bound) + (r.notes ? ` (${r.notes})` : ''));
}

// ---- memory: bytes live at each kernel call in run order, the peak, what is live at a step ----
const mem = data.memory;
const memValues = new Map();  // block -> the values placed in it, in program order
if (mem && mem.known) mem.values.forEach(([block, first, last, value, site, siteId, layer, own]) => {
  if (!memValues.has(block)) memValues.set(block, []);
  memValues.get(block).push({first, last, value, site, siteId, layer, own}); });
/** The values live at step, largest first (analysis/memory.py's live_at): each block live there with the
    value it holds (the latest written at or before it still read then) or, idle, the next written into it. */
function liveAt(step){
  return mem.spans.filter(([, , start, end]) => start <= step && step <= end).map(([block, bytes, , , returned]) => {
    const values = memValues.get(block) || [], now = values.filter(v => v.first <= step && step <= v.last);
    const v = now.length ? now[now.length - 1] : values.find(x => x.first > step);
    return Object.assign({block, bytes, returned, value: '', site: '', siteId: null, layer: mem.nobody}, v || {},
      {idle: !now.length, own: now.length ? v.own : 0});
  }).sort((a, b) => b.bytes - a.bytes);
}
function drawMemory(){
  const box = document.getElementById('memory'), notes = mem ? [...mem.checks, ...mem.notes].map(t => h('p', {class: 'memnote'}, t)) : [];
  if (!mem || !mem.known || mem.peak_step < 0){
    box.replaceChildren(h('p', {class: 'warn'}, !mem ? 'No memory plan: the lineage was saved before relaytrace read plans, or the build has no VM memory passes.'
      : !mem.known ? `memory (${mem.entry}): not known at these sizes: ${mem.why}` : `memory (${mem.entry}): no kernel calls`), ...notes);
    return; }
  const dims = mem.dims.map(([k, v]) => `${k}=${v}`).join(', ');
  const svg = el('svg', {id: 'memchart', class: 'memchart chart'});
  box.replaceChildren(h('p', null, `${mem.entry}${dims ? ' at ' + dims : ''}: peak ${size(mem.peak)} of activations at `,
    siteCell(mem.steps[mem.peak_step], mem.step_sites[mem.peak_step]), ` (step ${mem.peak_step + 1} of ${mem.steps.length}); ${mem.blocks} planned blocks, ` +
    `${size(mem.planned)} in all; weights ${size(mem.weights)}, inputs ${size(mem.inputs)}`),
    svg, h('p', {id: 'memhover', class: 'memhover'}, 'hover a point'), h('div', {id: 'memstep'}), ...notes);
  const frame = chartBox(svg, 300, {l: 70, r: 16, t: 26, b: 40}), {width, ht, m} = frame, n = mem.steps.length;
  const unit = [2 ** 30, 2 ** 20, 2 ** 10, 1].find(u => mem.peak >= u) || 1, tick = unit * nice(mem.peak / unit / 5);
  const top = Math.max(Math.ceil(mem.peak * 1.08 / tick), 1) * tick, every = Math.max(1, Math.round(nice(n / 12)));
  const X = i => m.l + (n > 1 ? i / (n - 1) : 0.5) * (width - m.l - m.r), Y = v => ht - m.b - v / top * (ht - m.t - m.b);
  for (let v = 0; v <= top * 1.0001; v += tick) yTick(svg, frame, Y(v), size(v));
  for (let i = 0; i < n; i += every) xTick(svg, frame, X(i), String(i + 1));
  axisTitles(svg, frame, 'kernel calls in run order (step)', 'bytes live');
  const line = mem.live.map((v, i) => `${X(i)},${Y(v)}`).join('L');
  el('path', {d: `M${X(0)},${Y(0)}L${line}L${X(n - 1)},${Y(0)}Z`, class: 'area'}, svg);
  el('path', {d: `M${line}`, class: 'line'}, svg);
  el('text', {x: m.l + 6, y: m.t - 10, class: 'note'}, svg).textContent =
    `weights: ${size(mem.weights)} more, read-only for the whole run (not drawn)`;
  el('line', {class: 'cursor', y1: m.t, y2: ht - m.b}, svg);
  const px = X(mem.peak_step), py = Y(mem.peak), right = px > width * 0.6;
  let held = mem.peak_step; while (held + 1 < n && mem.live[held + 1] === mem.peak) held++;
  el('line', {x1: px, x2: px, y1: py, y2: ht - m.b, class: 'peak'}, svg);
  el('text', {x: px + (right ? -8 : 8), y: py - 8, 'text-anchor': right ? 'end' : 'start', class: 'peak-label'}, svg).textContent =
    `peak ${size(mem.peak)} at ${mem.steps[mem.peak_step]}` + (held > mem.peak_step ? ` (and so to step ${held + 1})` : '');
  const r = n > 300 ? 1.5 : n > 150 ? 2 : 3;
  mem.live.forEach((v, i) => el('circle', {cx: X(i), cy: Y(v), r: i === mem.peak_step ? 5 : r,
    class: i === mem.peak_step ? 'step peak' : 'step', 'data-step': i}, svg));
  const stepAt = e => { if (e.target.dataset && e.target.dataset.step !== undefined) return Number(e.target.dataset.step);
    const b = svg.getBoundingClientRect();
    return Math.min(n - 1, Math.max(0, Math.round((e.clientX - b.left - m.l) / (width - m.l - m.r) * (n - 1)))); };
  svg.onmousemove = e => { const i = stepAt(e);
    document.getElementById('memhover').textContent = `step ${i + 1}: ${mem.steps[i]}, ${size(mem.live[i])} live`; };
  svg.onclick = e => showStep(stepAt(e));
  showStep(mem.peak_step);
}
/** Step i picked: the cursor there; below, its values live (largest first) and the layers that wrote them. */
function showStep(i){
  const svg = document.getElementById('memchart'), cursor = svg.querySelector('line.cursor');
  const x = svg.querySelector(`circle[data-step="${i}"]`).getAttribute('cx');
  cursor.setAttribute('x1', x); cursor.setAttribute('x2', x);
  svg.querySelectorAll('circle.step').forEach(c => c.classList.toggle('picked', c.dataset.step === String(i)));
  const live = liveAt(i), total = live.reduce((a, v) => a + v.bytes, 0), idle = live.filter(v => v.idle);
  const byLayer = new Map(), weights = new Map(mem.layer_weights);
  live.filter(v => !v.idle).forEach(v => byLayer.set(v.layer, (byLayer.get(v.layer) || 0) + v.own));
  const layerCell = name => layerDetail.has(name) ? layerLink(name) : name;
  document.getElementById('memstep').replaceChildren(
    h('p', {class: 'memhead'}, `step ${i + 1} of ${mem.steps.length}${i === mem.peak_step ? ' (the peak)' : ''}, `,
      siteCell(mem.steps[i], mem.step_sites[i]), `: ${size(total)} live in ${live.length} block(s)` +
      (idle.length ? `, ${idle.length} of them (${size(idle.reduce((a, v) => a + v.bytes, 0))}) idle: kept for the next value written into them` : '')),
    h('div', {class: 'memtables'},
      table(['block', 'bytes', 'value', 'layer', 'written by', 'idle'], live.map(v => [v.block, size(v.bytes),
        v.idle ? `kept for ${v.value}` : `${v.value} (${size(v.own)})`,
        layerCell(v.layer), h('span', null, v.site ? siteCell(v.site, v.siteId) : '', v.returned ? ' (returned)' : ''), v.idle ? 'idle' : ''])),
      table(['layer', 'its values here', '% of live', 'its weights'], Array.from(byLayer).sort((a, b) => b[1] - a[1]).map(([name, bytes]) =>
        [layerCell(name), size(bytes), (100 * bytes / (total || 1)).toFixed(1), size(weights.get(name) || 0)]))));
}

// ---- advice: each finding, its saving, evidence and change; its layers open their pane ----
function drawAdvice(){
  const box = document.getElementById('advice');
  if (!data.advice.length){ box.replaceChildren(h('p', null, 'No advice: no rule found anything worth a line in this run.')); return; }
  box.replaceChildren(h('ol', {class: 'advice'}, ...data.advice.map(f => h('li', null,
    h('span', {class: 'title'}, f.title), ` (${f.rule}): `, f.saving_ms ? `estimated saving ${f.saving_ms.toFixed(3)} ms per run` : 'saving not estimated',
    h('ul', null, ...f.evidence.map(e => h('li', null, e)),
      h('li', null, `change: ${f.what}: ${f.how}` + (f.measured ? ' (relaytrace advise DIR --verify measures it)' : '')),
      f.layers.length ? h('li', null, 'layers: ', ...f.layers.slice(0, 12).flatMap((name, i) =>
        [i ? ', ' : '', layerDetail.has(name) ? layerLink(name) : name]), f.layers.length > 12 ? ` and ${f.layers.length - 12} more` : '') : null)))));
}

// ---- the detail pane ----
/** A link (data-layer or data-site: name) that opens the pane of that layer or call site. */
/** A link to layer `name`'s pane. */
function layerLink(name){
  const a = h('a', {href: '#', 'data-layer': name}, name);
  a.onclick = e => { e.preventDefault(); showLayer(name); };
  return a;
}
/** A link to call site s's pane (data-site: its id), its label the text. */
function siteLink(s){
  const a = h('a', {href: '#', 'data-site': s.id}, s.label);
  a.onclick = e => { e.preventDefault(); showSite(s.id); };
  return a;
}
/** A call site's label, a link to its pane when the page has that site (id not null). */
function siteCell(label, id){ return id === null || id === undefined ? label : siteLink(data.sites[id]); }
/** A table of head (strings) and rows (arrays of cells, each a node or a string). */
function table(head, rows){
  return h('table', null, h('thead', null, h('tr', null, ...head.map(x => h('th', null, x)))),
    h('tbody', null, ...rows.map(r => h('tr', null, ...r.map(c => h('td', null, c))))));
}
/** The pane shows title and parts (nodes; null for none). */
function detail(title, parts){
  document.getElementById('detail').replaceChildren(h('h3', null, title), ...parts.filter(p => p !== null));
}
function showLayer(name){
  const row = data.layers.find(l => l.layer === name), numerics = layerErrors.get(name);
  const d = layerDetail.get(name) || (row ? {ops: [], source: []} : null); if (!d) return;  // a row of no op: a shape function's
  const sites = (layerSites.get(name) || []).map(id => data.sites[id]);
  const time = h('p', null, row ? `${row.ms.toFixed(3)} ms (${row.percent.toFixed(2)}% of kernel time)` : 'no time of its own');
  if (d.source.length) time.append(h('br'), `made at: ${d.source.join(', ')}`);
  detail(`layer ${name}`, [
    time,
    window.showCode ? h('p', null, (a => { a.onclick = e => { e.preventDefault(); window.showCode(name);
      document.getElementById('code').scrollIntoView(); }; return a; })(h('a', {href: '#'}, 'see the code it became'))) : null,
    roofLine(name),
    precisionLine(name),
    numerics ? h('p', {class: `numerics ${numerics.status}`}, h('b', null, 'numerics'), `: ${numerics.text}`) : null,
    h('b', null, 'ops'), table(['op', 'inputs', 'output', 'passes'], d.ops.map(o => [o.op, o.inputs, o.output,
      o.history.join(' → ') || (o.eliminated ? 'eliminated by ' + o.eliminated : '')])),
    h('b', null, 'kernel call sites'), table(['site', 'role', 'median us', 'min', 'max', 'verdict'], sites.map(s =>
      [siteLink(s), s.roles.get(name) || 'serves', s.us.toFixed(1), s.min_us.toFixed(1), s.max_us.toFixed(1),
       s.status + (s.reasons ? ': ' + s.reasons : '')])),
  ]);
  if (row) pick('layers', row);
  document.querySelectorAll('#roofline circle').forEach(c => c.classList.toggle('picked', c.dataset.layer === name));
}
function showSite(id){
  const s = data.sites[id]; if (!s) return;
  document.querySelectorAll('.timeline rect').forEach(r => r.classList.toggle('picked', r.dataset.site === String(id)));
  detail(`call site ${s.label}`, [
    h('p', null, `kernel ${s.kernel}: median ${s.us.toFixed(1)} us (min ${s.min_us.toFixed(1)}, max ${s.max_us.toFixed(1)})`,
      h('br'), `arguments: ${s.shapes}`, h('br'), `verification: ${s.status}${s.reasons ? ' — ' + s.reasons : ''}`,
      ...(s.work ? [h('br'), `work: ${s.work}`] : [])),
    h('b', null, 'what it runs'), table(['layer', 'role'], Array.from(s.roles, ([layer, role]) => [layerLink(layer), role])),
  ]);
}
const kernelByName = new Map(data.kernels.map(k => [k.name, k]));
/** A kernel's pane: its time, shapes and verdict, each call site, the layers it runs. */
function showKernel(name){
  const k = kernelByName.get(name); if (!k) return;
  const sites = data.sites.filter(s => s.kernel === name);
  detail(`kernel ${name}`, [
    h('p', null, `${k.us.toFixed(1)} us in ${k.count} call(s), ${k.percent.toFixed(2)}% of kernel time (min ${k.min_us.toFixed(1)}, max ${k.max_us.toFixed(1)}); ${k.device}`,
      h('br'), `arguments: ${k.shapes}`, h('br'), `verification: ${k.status}`),
    h('b', null, 'call sites'), table(['site', 'median us', 'layers'], sites.map(s =>
      [siteLink(s), s.us.toFixed(1), h('span', null, ...s.layers.flatMap((l, i) => [i ? ', ' : '', layerLink(l)]))])),
    h('b', null, 'layers it runs'), table(['layer', 'ms'], k.layers.map(l => { const r = data.layers.find(x => x.layer === l);
      return [layerLink(l), r ? r.ms.toFixed(3) : 'fused: billed to another layer']; })),
  ]);
}
/** An op type's pane: its time and count, the layers whose ops are of it. */
function showOpType(op){
  const t = data.op_types.find(x => x.op === op); if (!t) return;
  detail(`op type ${op}`, [
    h('p', null, `${t.ms.toFixed(3)} ms (${t.percent.toFixed(2)}% of kernel time), ${t.count} op(s) in ${t.layers} layer(s)`),
    h('b', null, 'layers'), table(['layer', 'layer ms'], t.layer_list.map(l => { const r = data.layers.find(x => x.layer === l);
      return [layerLink(l), r ? r.ms.toFixed(3) : 'fused: billed to another layer']; })),
  ]);
}
// ---- the layer graph: grouped by module depth, laid out by dagre, pan and zoom ----
const HEAT = ['#fff5f0', '#fee0d2', '#fcbba1', '#fc9272', '#fb6a4a', '#ef3b2c', '#cb181d', '#99000d'];
const graph = {depth: 0, nodes: new Map(), box: null, full: null};  // nodes: group key -> {el, x, y, group}
/** The layers grouped by their module prefix at depth (0: each its own): key -> {key, layers, ms, builtin}. */
function groupsAt(depth){
  const groups = new Map();
  data.graph.nodes.forEach(n => { const key = prefix(n.layer, depth);
    const g = groups.get(key) || {key, layers: [], ms: 0, builtin: true};
    g.layers.push(n.layer); g.ms += n.ms; g.builtin = g.builtin && n.builtin; groups.set(key, g); });
  return groups;
}
function defaultDepth(){  // every layer up to 120 nodes, else the deepest grouping of at most 120
  if (data.graph.nodes.length <= 120) return 0;
  let d = 1; while (d < 8 && groupsAt(d + 1).size <= 120) d++; return d;
}
/** Lay out and draw the groups at graph.depth. dagre's graph keys its nodes by plain
    object properties, so it gets ids of ours (n0, n1, ...), never a name. */
function drawGraph(){
  const svg = document.getElementById('graph'); svg.replaceChildren();
  const groups = groupsAt(graph.depth), g = new dagre.graphlib.Graph(), ids = new Map();
  g.setGraph({rankdir: 'TB', nodesep: 14, ranksep: 28, marginx: 8, marginy: 8}); g.setDefaultEdgeLabel(() => ({}));
  const hottest = Math.max(...Array.from(groups.values()).map(x => x.ms), 1e-9);
  groups.forEach(x => { x.text = x.key + (x.layers.length > 1 || x.layers[0] !== x.key ? ` (${x.layers.length})` : '');
    x.sub = x.builtin ? 'VM builtin' : x.ms > 0 ? `${x.ms.toFixed(3)} ms`
      : x.layers.some(l => (layerSites.get(l) || []).length) ? 'fused: time billed to another layer' : 'no kernel';
    ids.set(x.key, `n${ids.size}`);
    g.setNode(ids.get(x.key), {width: Math.max(70, 6.2 * Math.max(x.text.length, x.sub.length) + 14), height: 34, group: x}); });
  data.graph.edges.forEach(([a, b]) => { const u = prefix(a, graph.depth), v = prefix(b, graph.depth);
    if (u !== v) g.setEdge(ids.get(u), ids.get(v)); });
  dagre.layout(g);
  const marker = el('marker', {id: 'arrow', viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 6, markerHeight: 6,
    orient: 'auto'}, el('defs', {}, svg));
  el('path', {d: 'M0,0L8,4L0,8z', fill: '#8a8f99'}, marker);
  const root = el('g', {}, svg);
  g.edges().forEach(e => { const pts = g.edge(e).points;
    el('path', {d: 'M' + pts.map(p => `${p.x},${p.y}`).join('L'), class: 'edge', 'marker-end': 'url(#arrow)'}, root); });
  graph.nodes = new Map();
  g.nodes().forEach(id => { const n = g.node(id), x = n.group, key = x.key;
    const step = Math.min(Math.round(x.ms / hottest * (HEAT.length - 1)), HEAT.length - 1);
    const node = el('g', {class: 'gnode' + (x.builtin ? ' builtin' : ''), transform: `translate(${n.x - n.width / 2},${n.y - n.height / 2})`,
      'data-key': key}, root);
    el('rect', {width: n.width, height: n.height, rx: 5, fill: x.builtin ? '#f4efe9' : HEAT[step]}, node);
    const dark = !x.builtin && step >= 5 ? ' dark' : '';
    el('text', {x: 7, y: 14, class: 'name' + dark}, node).textContent = x.text;
    el('text', {x: 7, y: 28, class: 'sub' + dark}, node).textContent = x.sub;
    el('title', {}, node).textContent = x.layers.slice(0, 20).join('\n') + (x.layers.length > 20 ? '\n...' : '');
    node.onclick = () => { if (x.layers.length === 1 && x.layers[0] === key) showLayer(key); else showModule(key); };
    graph.nodes.set(key, {el: node, x: n.x, y: n.y, group: x});
  });
  const size = g.graph(); graph.full = [0, 0, Math.max(size.width, 10), Math.max(size.height, 10)];
  fit();
}
function setBox(box){ graph.box = box; document.getElementById('graph').setAttribute('viewBox', box.join(' ')); }
function fit(){  // the graph's whole width, at most 1:1; a tall graph starts at its top
  const svg = document.getElementById('graph'), w = svg.clientWidth || 900, ht = svg.clientHeight || 600;
  const scale = Math.max(graph.full[2] / w, 1);
  setBox([(graph.full[2] - w * scale) / 2, 0, w * scale, ht * scale]);  // centred
}
function centreOn(key){  // a node already in view stays where it is
  const n = graph.nodes.get(key); if (!n) return;
  const [x, y, w, ht] = graph.box;
  if (n.x > x && n.x < x + w && n.y > y && n.y < y + ht) return;
  setBox([n.x - w / 2, n.y - ht / 2, w, ht]); }
function markLayers(layers){
  const keys = new Set(layers.map(l => prefix(l, graph.depth)));
  graph.nodes.forEach((n, key) => n.el.classList.toggle('hl', keys.has(key)));
  const first = Array.from(keys).find(k => graph.nodes.has(k)); if (first) centreOn(first);
}
function findInGraph(q){
  let count = 0, first = null;
  const matches = l => l.toLowerCase().includes(q) || (layerSites.get(l) || []).some(id => data.sites[id].label.toLowerCase().includes(q));
  graph.nodes.forEach((n, key) => { const hit = !!q && n.group.layers.some(matches);
    n.el.classList.toggle('found', hit); if (hit) { count++; first = first || key; } });
  document.getElementById('found').textContent = q ? `${count} node(s) in the graph match` : '';
  if (first) centreOn(first);
}
function graphControls(){
  const svg = document.getElementById('graph'), select = document.getElementById('depth');
  let deepest = 1; data.graph.nodes.forEach(n => { deepest = Math.max(deepest, modulePath(n.layer).split(/[./]/).filter(Boolean).length); });
  for (let d = 1; d < Math.min(deepest, 8); d++) select.add(new Option(String(d), String(d)));
  select.add(new Option('every layer', '0'));
  select.value = String(graph.depth);
  select.onchange = () => { graph.depth = Number(select.value); drawGraph(); findInGraph(document.getElementById('search').value.toLowerCase()); };
  document.getElementById('fit').onclick = fit;
  svg.addEventListener('wheel', e => { e.preventDefault();
    const [x, y, w, ht] = graph.box, r = svg.getBoundingClientRect(), k = e.deltaY > 0 ? 1.2 : 1 / 1.2;
    const px = x + (e.clientX - r.left) / r.width * w, py = y + (e.clientY - r.top) / r.height * ht;
    setBox([px - (px - x) * k, py - (py - y) * k, w * k, ht * k]); }, {passive: false});
  let drag = null;
  svg.addEventListener('mousedown', e => { drag = {x: e.clientX, y: e.clientY, box: graph.box}; });
  window.addEventListener('mouseup', () => { drag = null; });
  svg.addEventListener('mousemove', e => { if (!drag) return;
    const r = svg.getBoundingClientRect(), [x, y, w, ht] = drag.box;
    setBox([x - (e.clientX - drag.x) / r.width * w, y - (e.clientY - drag.y) / r.height * ht, w, ht]); });
}

icicleRoot = d3.hierarchy(hierarchyOf());
drawAdvice();
drawIcicle(null);
drawTimeline();
drawRoofline();
drawMemory();
graph.depth = defaultDepth();
graphControls();
drawGraph();
document.getElementById('legend').replaceChildren(...Array.from(COLOURS, ([part, colour]) => {
  const swatch = h('i'); swatch.style.background = colour; return h('span', null, swatch, part); }));
// a click on a row opens its pane: a layer's, a kernel's, an op type's, a call site's (or a layer's) verdict
[['#layers', showLayer], ['#roof', showLayer], ['#kernels', showKernel], ['#optypes', showOpType],
 ['#checks', key => key.startsWith('layer ') ? showLayer(key.slice(6)) : showSite(key)]].forEach(([id, show]) =>
  document.querySelectorAll(id + ' tbody tr').forEach(tr => tr.addEventListener('click', () => show(tr.dataset.key))));
document.body.dataset.ready = String(performance.now());
