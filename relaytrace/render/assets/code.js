// The code viewer: model layers | Relax program | kernel TIR, linked by origin (data.code).
// Its call sites are code.sites[i], named by i; a site the page times is data.sites[s.site].
// Names and code are only ever text (textContent); a pane draws a kernel's TIR when one is picked.
(function(){
  const code = data.code; if (!code) return;
  const fnText = new Map(code.functions), kernels = new Map(code.kernels), sites = code.sites;
  const layerList = document.getElementById('code-layers'), relax = document.getElementById('code-relax');
  const tir = document.getElementById('code-tir'), info = document.getElementById('code-info');
  const state = {fn: null, site: null, layer: null};  // site: an index of sites
  const built = document.getElementById('code-built');
  built.onchange = () => { if (state.site !== null) drawSite(state.site); };
  // scroll a pane (not the page) to show one of its lines
  function reveal(box, e){ if (e) box.scrollTop = Math.max(0, e.offsetTop - 40); }
  function lines(pre, text, cls){ pre.replaceChildren(...text.split('\n').map((t, i) =>
    h('span', {class: cls, 'data-line': String(i + 1)}, `${String(i + 1).padStart(4)}  ${t}\n`))); }
  function drawRelax(fn){ if (state.fn === fn) return; state.fn = fn; lines(relax, fnText.get(fn) || '', 'rl'); }
  function drawSite(i){
    const s = sites[i]; if (!s) return; state.site = i;
    drawRelax(s.function);
    relax.querySelectorAll('.on,.also').forEach(e => e.classList.remove('on', 'also'));
    sites.forEach(o => { if (o.function === s.function && Object.values(o.blocks).some(b => b.layer === state.layer)){
      const e = relax.querySelector(`[data-line="${o.relax_line}"]`); if (e) e.classList.add('also'); } });
    info.querySelectorAll('a[data-code-site]').forEach(a => a.classList.toggle('on', a.dataset.codeSite === String(i)));
    const at = relax.querySelector(`[data-line="${s.relax_line}"]`); if (at){ at.classList.add('on'); reveal(relax, at); }
    const k = kernels.get(s.kernel), kt = kernelByName.get(s.kernel);
    const asBuilt = k && k.built && built.checked;
    built.disabled = !(k && k.built);
    const timed = s.site === null ? null : data.sites[s.site];  // this call's time and work, else the kernel's over its calls
    document.getElementById('code-kernel').textContent = `${s.label}: ${s.kernel}` +
      (timed ? ` — ${timed.us.toFixed(1)} us median${timed.work ? '; ' + timed.work : ''}`
        : kt ? ` — ${kt.us.toFixed(1)} us in ${kt.count} call(s)` : '') +
      (k && k.built ? (asBuilt ? ' (as built)' : ' (as fusion left it)') : '');
    if (!k){ tir.replaceChildren('no TIR: a library call or a kernel TVM did not compile'); return; }
    lines(tir, asBuilt ? k.built : k.text, 'tl');
    state.built = asBuilt;
    // each block's lines: a fused block's own verdict and owner; a built block's own
    // (never verified) verdict, owned by the layers of the fused blocks it was made from
    const spans = asBuilt ? k.built_blocks.map(b => [b.lines, b.status, b.sources.map(i => s.blocks[String(i)]).filter(Boolean)])
                          : k.blocks.map((b, i) => [b.lines, b.status, [s.blocks[String(i)]].filter(Boolean)]);
    spans.forEach(([[first, last], status, owners], j) => {
      for (let n = first; n <= last; n++){ const e = tir.children[n - 1]; if (!e) continue;
        e.dataset.block = String(j); e.classList.add(status);
        if (owners.some(o => o.layer === state.layer)) e.classList.add('on');
        if (owners.some(o => o.kind === NAMES.Kind.INSERTED)) e.classList.add('inserted'); } });
    if (s.ambiguous) info.append(h('p', {class: 'warn'}, 'two ops of one kind in this kernel that data flow does not tell apart: the first way was taken'));
    reveal(tir, tir.querySelector('.on'));
  }
  function pickLayer(name){
    state.layer = name;
    layerList.querySelectorAll('li').forEach(li => li.classList.toggle('on', li.dataset.layer === name));
    const found = sites.map((s, i) => i).filter(i => Object.values(sites[i].blocks).some(o => o.layer === name));
    if (!found.length){ info.replaceChildren(`${name}: no kernel block computes it`); return; }
    // every call site of the layer, in run order, each a link to its Relax line and TIR
    const links = found.flatMap((i, n) => { const a = h('a', {href: '#', 'data-code-site': i}, sites[i].label);
      a.onclick = e => { e.preventDefault(); drawSite(i); }; return n ? [', ', a] : [a]; });
    info.replaceChildren(`${name}: ${found.length} call site(s): `, ...links);
    const roof = roofLine(name); if (roof) info.append(roof);
    drawSite(found[0]);
  }
  function pickBlock(j){
    const s = sites[state.site], k = s && kernels.get(s.kernel); if (!k) return;
    const b = state.built ? k.built_blocks[j] : k.blocks[j];
    const owners = (state.built ? b.sources : [j]).map(i => s.blocks[String(i)]).filter(Boolean);
    const what = owners.length ? owners.map(o => `${o.op} of layer ${o.layer} (${o.kind})` + (o.source ? ` at ${o.source}` : '')).join('; ')
                               : 'no origin at this site';
    info.textContent = `block ${b.name}` + (state.built ? '' : ` (${b.member || 'no member'})`) + `: ${what} — ${b.status}` +
      (b.reasons.length ? ': ' + b.reasons.join('; ') : '');
    if (owners.length){ state.layer = owners[0].layer;
      layerList.querySelectorAll('li').forEach(li => li.classList.toggle('on', li.dataset.layer === state.layer));
      reveal(layerList, layerList.querySelector('li.on')); }
    tir.querySelectorAll('.on').forEach(e => e.classList.remove('on'));
    tir.querySelectorAll(`[data-block="${j}"]`).forEach(e => e.classList.add('on'));
  }
  // the layers in the order they first run
  const names = Array.from(new Set(sites.flatMap(s => Object.values(s.blocks).map(o => o.layer))));
  layerList.replaceChildren(...names.map(n => { const li = h('li', {'data-layer': n}, n); li.onclick = () => pickLayer(n); return li; }));
  tir.addEventListener('click', e => { const t = e.target.closest('[data-block]'); if (t) pickBlock(Number(t.dataset.block)); });
  relax.addEventListener('click', e => { const t = e.target.closest('[data-line]'); if (!t) return;
    const hit = sites.findIndex(s => s.function === state.fn && String(s.relax_line) === t.dataset.line);
    if (hit >= 0) drawSite(hit); });
  document.getElementById('code-search').addEventListener('input', e => { const q = e.target.value.toLowerCase();
    layerList.querySelectorAll('li').forEach(li => { li.style.display = !q || li.dataset.layer.toLowerCase().includes(q) ? '' : 'none'; });
    [relax, tir].forEach(pre => { let first = null; pre.querySelectorAll('span').forEach(s => {
      const m = q.length > 1 && s.textContent.toLowerCase().includes(q); s.classList.toggle('found', m); if (m && !first) first = s; });
      reveal(pre, first); }); });
  window.showCode = pickLayer;  // a layer's pane links here
  drawRelax(code.entry);
})();
document.body.dataset.codeReady = String(performance.now());
