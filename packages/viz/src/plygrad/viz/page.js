// plygrad-viz report page: draws the data embedded in <script id="trace-data">; no network, no libraries.
"use strict";
(function () {
  const errors = [];
  function report(msg) {
    errors.push(String(msg));
    const box = document.getElementById("errors");
    if (box) box.textContent = errors.join("\n");
  }
  window.onerror = function (msg, src, line, col) { report(msg + " (line " + line + ":" + col + ")"); };
  window.addEventListener("unhandledrejection", function (e) { report("unhandled rejection: " + e.reason); });

  const D = JSON.parse(document.getElementById("trace-data").textContent);
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  function fmtTime(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (ns >= 1e3) return (ns / 1e3).toFixed(2) + " us";
    return ns + " ns";
  }
  function fmtBytes(b) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(2) : String(b)) + " " + units[i];
  }
  function hue(n) { return (n * 137.508) % 360; }

  // ---- summary ----------------------------------------------------------------------------------------------
  function renderSummary() {
    const s = D.summary;
    const peak = Object.entries(s.peak_bytes).map(([d, b]) => d + " " + fmtBytes(b)).join(", ") || "none recorded";
    const cards = [
      ["wall time", fmtTime(s.wall_ns)],
      [s.device_timed ? "device time (kernels)" : "kernel time (host-timed)", fmtTime(s.kernel_ns)],
      ["building plans (compile)", fmtTime(s.build_ns)],
      ["launches", s.launches], ["kernels", s.kernels], ["schedules", s.schedules], ["copies", s.copies],
      ["peak memory", peak],
    ];
    $("cards").innerHTML = cards.map(([k, v]) =>
      '<div class="card"><div class="v">' + esc(v) + '</div><div class="k">' + esc(k) + "</div></div>").join("");
    const top = D.stats.slice(0, 5).map((k) =>
      "<li>" + esc(k.name) + " — " + (100 * k.share).toFixed(1) + "%, " + k.gflops.toFixed(2) + " GFLOP/s, " +
      k.gbs.toFixed(2) + " GB/s</li>").join("");
    $("top").innerHTML = top ? "<ol>" + top + "</ol>" : '<p class="hint">no kernel was launched</p>';
  }

  // ---- sortable tables --------------------------------------------------------------------------------------
  // a table of `rows` sorted by a clicked column; only the first `limit` rows of the order are drawn (the layout of
  // thousands of rows costs seconds), and `note` says so
  function sortable(table, rows, columns, onPick, limit, note) {
    let key = null, dir = -1;
    const head = table.querySelector("thead tr");
    head.innerHTML = columns.map((c, i) =>
      '<th tabindex="0" data-col="' + i + '" class="' + (c.cls || "") + '">' + esc(c.title) + "</th>").join("");
    const body = table.querySelector("tbody");
    function draw() {
      const order = rows.slice();
      if (key !== null) {
        const get = columns[key].sort;
        order.sort((a, b) => { const x = get(a), y = get(b); return (x < y ? -1 : x > y ? 1 : 0) * dir; });
      }
      const drawn = order.slice(0, limit);
      if (note) note.textContent = rows.length > drawn.length ? "the first " + drawn.length + " of " + rows.length +
        " rows in this order: sort by another column to see others" : "";
      body.innerHTML = drawn.map((r) => '<tr tabindex="0" data-row="' + r.__row + '">' +
        columns.map((c) => '<td class="' + (c.cls || "") + '">' + c.cell(r) + "</td>").join("") + "</tr>").join("");
      head.querySelectorAll("th").forEach((th, i) => {
        if (i === key) th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        else th.removeAttribute("aria-sort");
      });
    }
    function pickHeader(th) {
      const col = Number(th.dataset.col);
      dir = key === col ? -dir : (columns[col].numeric ? -1 : 1);
      key = col;
      draw();
      head.querySelector('th[data-col="' + col + '"]').focus();
    }
    head.addEventListener("click", (e) => { const th = e.target.closest("th"); if (th) pickHeader(th); });
    head.addEventListener("keydown", (e) => {
      const th = e.target.closest("th");
      if (th && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); pickHeader(th); }
    });
    body.addEventListener("click", (e) => { const tr = e.target.closest("tr"); if (tr) onPick(rows[tr.dataset.row]); });
    body.addEventListener("keydown", (e) => {
      const tr = e.target.closest("tr");
      if (!tr) return;
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onPick(rows[tr.dataset.row]); }
      if (e.key === "ArrowDown" && tr.nextElementSibling) { e.preventDefault(); tr.nextElementSibling.focus(); }
      if (e.key === "ArrowUp" && tr.previousElementSibling) { e.preventDefault(); tr.previousElementSibling.focus(); }
    });
    draw();
  }

  function renderKernelTable() {
    const rows = D.stats.map((s, i) => Object.assign({ __row: i }, s));
    const maxShare = Math.max(1e-9, ...rows.map((r) => r.share));
    sortable($("kernel-table"), rows, [
      { title: "kernel", cls: "name", sort: (r) => r.name, cell: (r) => esc(r.name) },
      { title: "device", cls: "name", sort: (r) => r.device, cell: (r) => esc(r.device) },
      { title: "launches", numeric: true, sort: (r) => r.launches, cell: (r) => r.launches },
      { title: "total time", numeric: true, sort: (r) => r.total_ns, cell: (r) => fmtTime(r.total_ns) },
      { title: "share", numeric: true, sort: (r) => r.share, cell: (r) => '<span class="bar" style="width:' +
        Math.round(60 * r.share / maxShare) + 'px"></span>' + (100 * r.share).toFixed(1) + "%" },
      { title: "GFLOP/s", numeric: true, sort: (r) => r.gflops, cell: (r) => r.gflops.toFixed(2) },
      { title: "GB/s", numeric: true, sort: (r) => r.gbs, cell: (r) => r.gbs.toFixed(2) },
    ], (r) => showKernel(r.index), D.table_rows, $("kernel-note"));
  }

  function renderLaunchTable() {
    const rows = D.launches.map((l, i) => ({ __row: i, n: i, kernel: l[0], run: l[1], start: l[2], dur: l[3] - l[2],
                                         dev: l[4] }));
    sortable($("launch-table"), rows, [
      { title: "#", numeric: true, sort: (r) => r.n, cell: (r) => r.n },
      { title: "kernel", cls: "name", sort: (r) => D.kernels[r.kernel].name, cell: (r) => esc(D.kernels[r.kernel].name) },
      { title: "run", numeric: true, sort: (r) => r.run, cell: (r) => r.run },
      { title: "start", numeric: true, sort: (r) => r.start, cell: (r) => fmtTime(r.start) },
      { title: "host time", numeric: true, sort: (r) => r.dur, cell: (r) => fmtTime(r.dur) },
      { title: "device time", numeric: true, sort: (r) => r.dev === null ? -1 : r.dev,
        cell: (r) => r.dev === null ? "—" : fmtTime(r.dev) },
    ], (r) => showKernel(r.kernel), D.table_rows, $("launch-note"));
    $("launches-cut").textContent = D.launches_total > D.launches.length ? "the page holds the first " +
      D.launches.length + " of " + D.launches_total + " launches; chrome_trace.json has all" : "";
  }

  // ---- kernel view ------------------------------------------------------------------------------------------
  function showKernel(index) {
    const k = D.kernels[index];
    if (!k) return;
    const opts = k.opts.map((o) => o[0] + "(axis=" + o[1] + ", amount=" + o[2] + ")").join(", ") || "none";
    const params = k.params.map((p) => "#" + p[0] + " " + p[1] + "[" + p[2] + "]" + (p[3] ? " written" : "")).join(", ");
    const computes = k.ast_ops.map((o) => o[0] + (o[1] > 1 ? " x" + o[1] : "")).join(", ") || "?";
    const kv = [["name", k.name], ["device", k.device + " (" + k.renderer + (k.arch ? " " + k.arch : "") + ")"],
      ["computes", computes],
      ["global size", JSON.stringify(k.global_size)], ["local size", JSON.stringify(k.local_size)],
      ["opts", opts], ["params", params], ["estimates", k.ops + " ops, " + k.mem + " bytes per launch"],
      ["launched from", k.sites.join("; ") || "?"]];
    const optText = (list) => list.map((o) => o[0] + "(" + o[1] + "," + o[2] + ")").join(" ") || "none";
    const beam = k.beam ? "<h3>BEAM " + k.beam.width + ": " + k.beam.tried + " candidates tried, the fastest</h3>" +
      '<table><thead><tr><th>time</th><th class="name">optimizations</th></tr></thead><tbody>' +
      k.beam.fastest.map((t) => "<tr" + (optText(t[0]) === optText(k.beam.chosen) ? ' class="sel"' : "") + "><td>" +
        fmtTime(Math.round(t[1] * 1e9)) + '</td><td class="name">' + esc(optText(t[0])) + "</td></tr>").join("") +
      "</tbody></table>" : "";
    $("kernel-view").innerHTML = "<dl class=\"kv\">" + kv.map(([a, b]) => "<dt>" + esc(a) + "</dt><dd>" + esc(b) +
      "</dd>").join("") + "</dl>" + beam + '<pre class="src">' + k.source.split("\n").map((l) => "<span>" + esc(l) + "</span>")
      .join("") + "</pre>" + (k.source_cut ? '<p class="hint">source cut at ' + k.source.length + " characters</p>" : "");
    document.querySelectorAll("#kernel-table tbody tr").forEach((tr) => {
      tr.classList.toggle("sel", D.stats[tr.dataset.row].index === index);
    });
  }

  // ---- schedule graph ---------------------------------------------------------------------------------------
  function renderGraph(which) {
    const g = D.graphs[which];
    const box = $("graph");
    if (!g) { box.innerHTML = '<p class="hint">no schedule was recorded</p>'; return; }
    const w = g.node_w, h = g.node_h;
    const parts = ['<svg width="' + g.width + '" height="' + g.height + '" role="img" aria-label="schedule graph">'];
    for (const [a, b] of g.edges) {
      const p = g.nodes[a], q = g.nodes[b];
      const x1 = p.x + w, y1 = p.y + h / 2, x2 = q.x, y2 = q.y + h / 2, mid = (x1 + x2) / 2;
      parts.push('<path d="M' + x1 + " " + y1 + " C" + mid + " " + y1 + " " + mid + " " + y2 + " " + x2 + " " + y2 + '"/>');
    }
    g.nodes.forEach((n, i) => {
      const label = n.label.length > 22 ? n.label.slice(0, 21) + "…" : n.label;
      parts.push('<g class="node" tabindex="0" data-node="' + i + '" transform="translate(' + n.x + "," + n.y + ')">' +
        "<title>" + esc(n.label + " (CALL " + n.call + (n.count > 1 ? ", " + n.count + " CALLs" : "") + ")") + "</title>" +
        '<rect width="' + w + '" height="' + h + '" rx="4" class="' + (n.count > 1 ? "more" : "") + '"/>' +
        '<text x="6" y="15">' + esc(label) + "</text></g>");
    });
    parts.push("</svg>");
    box.innerHTML = parts.join("");
    $("graph-note").textContent = g.calls + " CALLs in " + g.layers + " layers" +
      (g.collapsed ? "; collapsed to " + g.nodes.length + " nodes" : "");
    const pick = (el) => { const n = g.nodes[el.dataset.node]; if (n && n.kernel >= 0) showKernel(n.kernel); };
    box.onclick = (e) => { const el = e.target.closest("g.node"); if (el) pick(el); };
    box.onkeydown = (e) => { const el = e.target.closest("g.node"); if (el && e.key === "Enter") pick(el); };
  }

  function renderGraphPicker() {
    const sel = $("graph-pick");
    sel.innerHTML = D.graphs.map((g, i) => '<option value="' + i + '">schedule ' + g.schedule + " (" + g.calls +
      " CALLs, " + esc(g.producer || "?") + ")</option>").join("");
    sel.onchange = () => renderGraph(Number(sel.value));
    $("graphs-note").textContent = D.schedules > D.graphs.length ?
      "the first " + D.graphs.length + " of " + D.schedules + " schedules are laid out" : "";
    let biggest = 0;
    D.graphs.forEach((g, i) => { if (g.calls > D.graphs[biggest].calls) biggest = i; });
    sel.value = String(biggest);
    renderGraph(biggest);
  }

  // ---- timeline and memory: canvases with zoom (wheel) and pan (drag) ---------------------------------------
  // the part of the recording where something ran (the rest is mostly the program importing and exiting)
  function activity() {
    let a = Infinity, b = -Infinity;
    for (const r of D.runs) { a = Math.min(a, r[1]); if (r[2] !== null) b = Math.max(b, r[2]); }
    for (const r of D.builds) { a = Math.min(a, r[0]); b = Math.max(b, r[1]); }
    for (const m of D.markers) { a = Math.min(a, m[0]); b = Math.max(b, m[0]); }
    if (!(b > a)) return [0, Math.max(D.summary.wall_ns, 1)];
    const pad = (b - a) * 0.03;
    return [Math.max(0, a - pad), b + pad];
  }

  function zoomable(canvas, draw) {
    const home = activity();
    const view = { t0: home[0], t1: home[1] };
    let drag = null;
    function redraw() { draw(view); }
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect();
      const at = view.t0 + (view.t1 - view.t0) * (e.clientX - r.left) / r.width;
      const f = e.deltaY > 0 ? 1.25 : 0.8;
      view.t0 = at - (at - view.t0) * f;
      view.t1 = at + (view.t1 - at) * f;
      redraw();
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, t0: view.t0, t1: view.t1 }; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const shift = (drag.x - e.clientX) / canvas.getBoundingClientRect().width * (drag.t1 - drag.t0);
      view.t0 = drag.t0 + shift;
      view.t1 = drag.t1 + shift;
      redraw();
    });
    canvas.addEventListener("dblclick", () => { view.t0 = home[0]; view.t1 = home[1]; redraw(); });
    canvas.tabIndex = 0;
    canvas.addEventListener("keydown", (e) => {
      const d = (view.t1 - view.t0) * 0.1;
      if (e.key === "+" || e.key === "=") { view.t0 += d; view.t1 -= d; }
      else if (e.key === "-") { view.t0 -= d; view.t1 += d; }
      else if (e.key === "ArrowLeft") { view.t0 -= d; view.t1 -= d; }
      else if (e.key === "ArrowRight") { view.t0 += d; view.t1 += d; }
      else if (e.key === "0") { view.t0 = home[0]; view.t1 = home[1]; }
      else return;
      e.preventDefault();
      redraw();
    });
    window.addEventListener("resize", redraw);
    redraw();
  }

  function context(canvas, height) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 900;
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return [ctx, width];
  }

  function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function renderTimeline() {
    const canvas = $("timeline");
    const lanes = ["runs", "compile"].concat(D.devices);
    const laneH = 34, top = 18, left = 70;
    const rects = [];
    zoomable(canvas, (v) => {
      const [ctx, width] = context(canvas, top + lanes.length * laneH + 4);
      const x = (t) => left + (t - v.t0) / (v.t1 - v.t0) * (width - left);
      ctx.fillStyle = cssVar("--fg");
      ctx.font = "12px system-ui, sans-serif";
      lanes.forEach((name, i) => ctx.fillText(name, 4, top + i * laneH + 20));
      ctx.fillText(fmtTime(Math.max(0, v.t0)) + " … " + fmtTime(v.t1), left, 12);
      rects.length = 0;
      // a bar under a pixel wide that lands on the pixel its lane's previous bar filled is not drawn again: a run
      // of many short launches costs what the pixels it covers cost
      const lastPx = {};
      const bar = (t0, t1, lane, color, label) => {
        const a = Math.max(x(t0), left), b = Math.min(x(t1), width);
        if (b < left || a > width) return;
        const px = Math.floor(a);
        if (b - a < 1 && lastPx[lane] === px) return;
        lastPx[lane] = px;
        if (ctx.fillStyle !== color) ctx.fillStyle = color;
        ctx.fillRect(a, top + lane * laneH + 4, Math.max(b - a, 1), laneH - 8);
        rects.push([a, Math.max(b, a + 1), lane, label]);
      };
      const runColor = cssVar("--line"), buildColor = cssVar("--muted");
      for (const r of D.runs) if (r[2] !== null) bar(r[1], r[2], 0, runColor, () => "run of schedule " + r[0]);
      for (const b of D.builds) bar(b[0], b[1], 1, buildColor, () => "plan built: " + b[3] + " kernels, " +
        fmtTime(b[1] - b[0]));
      const laneOf = D.kernels.map((k) => 2 + D.devices.indexOf(k.device));
      const colorOf = D.kernels.map((k, i) => "hsl(" + hue(i) + ",65%,55%)");
      for (const l of D.launches) {
        bar(l[2], l[3], laneOf[l[0]], colorOf[l[0]], () => D.kernels[l[0]].name + " " + fmtTime(l[3] - l[2]));
      }
      ctx.strokeStyle = cssVar("--mark");
      ctx.fillStyle = cssVar("--mark");
      for (const [t, text] of D.markers) {
        const mx = x(t);
        if (mx < left || mx > width) continue;
        ctx.beginPath(); ctx.moveTo(mx, top); ctx.lineTo(mx, top + lanes.length * laneH); ctx.stroke();
        ctx.fillText(text, mx + 3, top + lanes.length * laneH);
      }
    });
    const tip = $("tip");
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect();
      const px = e.clientX - r.left, lane = Math.floor((e.clientY - r.top - top) / laneH);
      const hit = rects.find((q) => q[2] === lane && px >= q[0] && px <= q[1]);
      tip.style.display = hit ? "block" : "none";
      if (hit) { tip.textContent = hit[3](); tip.style.left = e.clientX + 12 + "px"; tip.style.top = e.clientY + 12 + "px"; }
    });
    canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  }

  function renderMemory() {
    const canvas = $("memory");
    const devices = Object.keys(D.memory);
    if (!devices.length) { $("memory-note").textContent = "no allocation was recorded"; return; }
    const peak = Math.max(1, ...devices.map((d) => D.memory[d].peak));
    const h = 160, left = 70;
    zoomable(canvas, (v) => {
      const [ctx, width] = context(canvas, h + 20);
      const x = (t) => left + (t - v.t0) / (v.t1 - v.t0) * (width - left);
      const y = (b) => 10 + h - b / peak * h;
      ctx.fillStyle = cssVar("--fg");
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillText(fmtBytes(peak), 4, 14);
      ctx.fillText("0", 4, h + 10);
      devices.forEach((d, i) => {
        const m = D.memory[d];
        ctx.strokeStyle = "hsl(" + hue(i + 3) + ",70%,50%)";
        ctx.beginPath();
        let last = 0;
        ctx.moveTo(left, y(0));
        for (const [t, b] of m.points) { ctx.lineTo(Math.max(left, x(t)), y(last)); ctx.lineTo(Math.max(left, x(t)), y(b)); last = b; }
        ctx.lineTo(width, y(last));
        ctx.stroke();
        ctx.fillStyle = cssVar("--peak");
        ctx.fillRect(x(m.peak_ns) - 2, y(m.peak) - 2, 5, 5);
        ctx.fillText(d + " peak " + fmtBytes(m.peak), left + 8 + i * 220, h + 18);
      });
    });
    $("peak-list").innerHTML = devices.map((d) => {
      const m = D.memory[d];
      return "<h3>" + esc(d) + ": " + fmtBytes(m.peak) + " at " + fmtTime(m.peak_ns) + "</h3><table><thead><tr>" +
        '<th class="name">buffer</th><th>bytes</th><th class="name">allocated by</th></tr></thead><tbody>' +
        m.at_peak.map((a) => '<tr><td class="name">' + a[0] + "</td><td>" + fmtBytes(a[1]) + '</td><td class="name">' +
        esc(a[2] || "?") + "</td></tr>").join("") + "</tbody></table>" +
        (m.at_peak_more ? '<p class="hint">and ' + m.at_peak_more + " smaller</p>" : "");
    }).join("");
  }

  try {
    const timings = {};
    const phases = [["summary", renderSummary], ["kernels", renderKernelTable], ["launches", renderLaunchTable],
      ["kernel", () => { if (D.stats.length) showKernel(D.stats[0].index); }], ["graph", renderGraphPicker],
      ["timeline", renderTimeline], ["memory", renderMemory]];
    for (const [name, draw] of phases) {
      const t0 = performance.now();
      draw();
      timings[name] = Math.round(performance.now() - t0);
    }
    document.body.dataset.renderMs = JSON.stringify(timings);
    document.body.dataset.ready = "1";
  } catch (e) {
    report((e && e.stack) || e);
  }
})();
