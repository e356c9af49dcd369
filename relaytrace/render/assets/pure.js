// The report's pure functions: no DOM, no data; the page inlines this before report.js
// and code.js, and tests/pure/test_report_js.py runs them in node against the Python
// they mirror (render/memory.py's size, model/layer_name.py's module_path).
/** A table cell's text: a whole number as it is, a small one to 3 significant digits, others to 3 decimals. */
function cell(v){ if (v === null || v === undefined) return ''; return (typeof v === 'number') ? (Number.isInteger(v) ? String(v) : Math.abs(v) < 0.01 ? v.toPrecision(3) : v.toFixed(3)) : (Array.isArray(v) ? v.join(', ') : String(v)); }
/** A number to p significant digits, '?' when not known. */
function sig(v, p){ return v == null ? '?' : Number(v).toPrecision(p || 3); }
/** Bytes in the unit a person reads (render/memory.py's size()). */
function size(n){
  for (const [unit, scale] of [['GiB', 2 ** 30], ['MiB', 2 ** 20], ['KiB', 2 ** 10]])
    if (Math.abs(n) >= scale) return n / scale < 100 ? `${+(n / scale).toPrecision(3)} ${unit}` : `${(n / scale).toFixed(0)} ${unit}`;
  return `${n.toFixed(0)} B`;
}
/** 1, 2 or 5 times a power of ten, the least at least v. */
function nice(v){ const p = Math.pow(10, Math.floor(Math.log10(v))); return [1, 2, 5, 10].find(k => k * p >= v * 0.999) * p; }
/** A layer's module path: its call suffix (the last `@` and digits alone: `relu@1`) dropped (model/layer_name.py). */
function modulePath(layer){ return layer.replace(/@[0-9]+$/, ''); }
/** A layer's module path cut to its first depth names (0: the layer itself); a path of an ONNX node's (`/a/b`) by `/`. */
function prefix(layer, depth){
  if (!depth) return layer;
  const sep = layer.startsWith('/') ? '/' : '.', parts = modulePath(layer).split(sep).filter(Boolean);
  return (sep === '/' ? '/' : '') + parts.slice(0, depth).join(sep);
}

if (typeof module === 'object' && module !== null && typeof module.exports === 'object') module.exports = {cell, sig, size, nice, modulePath, prefix};
