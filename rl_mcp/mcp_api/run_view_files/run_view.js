"use strict";
// The live run view: an MCP App (SEP-1865) speaking JSON-RPC 2.0 with its host over postMessage.
// It renders rl_start_training / rl_check_status / rl_compare_runs results, then reads the runs' status and metrics
// through the host (resources/read) while they train, and stops a run through it (tools/call).
(() => {
  const PROTOCOL = "2026-01-26";
  const POLL_MS = 3000;
  const ACTIVE = new Set(["starting", "running", "stopping"]);
  const COLORS = ["#2f6fde", "#d9534f", "#2e9d5b", "#b8860b", "#8a4fd6", "#d6336c"];
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const pending = new Map();
  let nextId = 1;
  let hostCaps = {};
  let timer = null;
  let shown = null; // {kind: "run", runId} or {kind: "compare", runIds, fallback}
  let history = []; // without resources/read: the curves grow from each status's latest figures
  let stopArmed = false;
  let rounds = 0;

  // --- the host bridge ---------------------------------------------------------------------------
  const send = (msg) => window.parent.postMessage({ jsonrpc: "2.0", ...msg }, "*");
  const notify = (method, params) => send({ method, params });
  function request(method, params) {
    const id = nextId++;
    send({ id, method, params });
    return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
  }

  const HANDLERS = {
    "ui/notifications/tool-input": () => undefined,
    "ui/notifications/tool-result": (result) => show(result),
    "ui/notifications/tool-cancelled": (p) => say(`the tool call was cancelled: ${p.reason || "no reason given"}`, true),
    "ui/notifications/host-context-changed": (ctx) => applyContext(ctx),
    "ui/resource-teardown": () => { clearTimeout(timer); return {}; },
    ping: () => ({}),
  };

  window.addEventListener("message", (event) => {
    const msg = event.data;
    if (event.source !== window.parent || !msg || msg.jsonrpc !== "2.0") return;
    if (msg.method === undefined) {
      const waiter = pending.get(msg.id);
      if (!waiter) return;
      pending.delete(msg.id);
      if (msg.error) waiter.reject(new Error(msg.error.message || "the host refused"));
      else waiter.resolve(msg.result);
      return;
    }
    const handler = HANDLERS[msg.method];
    if (msg.id === undefined) {
      if (handler) handler(msg.params || {});
    } else if (handler) {
      send({ id: msg.id, result: handler(msg.params || {}) || {} });
    } else {
      send({ id: msg.id, error: { code: -32601, message: `the run view does not handle ${msg.method}` } });
    }
  });

  function applyContext(ctx) {
    if (ctx.theme) document.documentElement.dataset.theme = ctx.theme;
    const vars = (ctx.styles && ctx.styles.variables) || {};
    for (const [name, value] of Object.entries(vars)) {
      if (value) document.documentElement.style.setProperty(name, value);
    }
  }

  // --- answers -----------------------------------------------------------------------------------
  function textOf(result) {
    const block = (result.content || []).find((c) => c.type === "text");
    return block ? block.text : "";
  }
  function structured(result) {
    if (result.structuredContent) return result.structuredContent;
    try { return JSON.parse(textOf(result)); } catch { return null; }
  }
  async function readJson(uri) {
    const result = await request("resources/read", { uri });
    return JSON.parse(result.contents[0].text);
  }
  const callTool = (name, args) => request("tools/call", { name, arguments: args });

  function show(result) {
    const data = structured(result);
    if (result.isError || !data) { say(textOf(result) || "the tool returned nothing to show", true); return; }
    history = [];
    if (Array.isArray(data.runs)) {
      const runIds = data.runs.map((r) => r.run_id).filter(Boolean);
      shown = { kind: "compare", runIds, fallback: data.runs };
      showComparison(data);
    } else if (data.run_id) {
      shown = { kind: "run", runId: data.run_id };
      showStatus(data);
    }
    refresh();
  }

  // --- one run -----------------------------------------------------------------------------------
  function showStatus(s) {
    $("view").dataset.status = s.status || "";
    $("title").textContent = s.environment ? `${s.run_id} · ${s.environment}` : s.run_id;
    $("status").textContent = s.status === "starting" && s.stage ? `starting: ${s.stage}` : s.status || "";
    $("stop").hidden = !ACTIVE.has(s.status) || s.status === "stopping";
    if (s.error) say(s.error, true);
    renderFindings(s.findings);
    if (s.rate_limited) return; // it checked nothing: keep the figures shown
    const latest = s.latest || {};
    const evalText = latest.eval_accuracy == null ? "–" : `${pct(latest.eval_accuracy)} (step ${latest.eval_step})`;
    facts([
      ["Step", `${s.step ?? 0} / ${s.total_steps ?? "?"}`],
      ["ETA", duration(s.eta_seconds)],
      ["Running", duration(s.running_seconds)],
      ["Reward", num(latest.reward_mean)],
      ["Loss", num(latest.loss)],
      ["Correct", latest.percent_correct == null ? "–" : pct(latest.percent_correct)],
      ["Eval accuracy", evalText],
      ...(latest.teacher_kl == null ? [] : [["KL to teacher", num(latest.teacher_kl)]]),
    ]);
    if (latest.step != null && !history.some((h) => h.step === latest.step)) history.push(latest);
  }

  async function refreshRun(runId) {
    let status;
    if (hostCaps.serverResources) {
      status = await readJson(`rl://runs/${runId}`);
      showStatus(status);
      drawRuns([{ name: runId, doc: await readJson(`rl://runs/${runId}/metrics`) }]);
    } else {
      status = structured(await callTool("rl_check_status", { run_id: runId })) || {};
      showStatus(status);
      const evals = history.filter((h) => h.eval_accuracy != null).map((h) => ({ step: h.eval_step, eval_accuracy: h.eval_accuracy }));
      drawRuns([{ name: runId, doc: { history, evals } }]);
      if (status.rate_limited) return Math.max(POLL_MS, 1000 * (status.next_check_in_seconds || 0));
    }
    return ACTIVE.has(status.status) ? POLL_MS : null;
  }

  $("stop").addEventListener("click", async () => {
    const button = $("stop");
    if (!stopArmed) {
      stopArmed = true;
      button.textContent = "Confirm stop";
      button.classList.add("armed");
      return;
    }
    button.disabled = true;
    button.textContent = "Stopping…";
    const runId = shown.runId;
    try {
      const result = await callTool("rl_stop_training", { run_id: runId });
      const answer = structured(result) || {};
      say(result.isError ? textOf(result) : answer.message || `${runId}: ${answer.status}`, Boolean(result.isError));
    } catch (err) {
      say(`stopping ${runId} failed: ${err.message}`, true);
    }
    stopArmed = false;
    button.disabled = false;
    button.textContent = "Stop run";
    button.classList.remove("armed");
    refresh();
  });

  // --- several runs (rl_compare_runs) ------------------------------------------------------------
  function showComparison(data) {
    $("view").dataset.status = "compare";
    $("title").textContent = `Comparing ${shown.runIds.length} runs`;
    $("status").textContent = "";
    $("stop").hidden = true;
    $("facts").replaceChildren();
    renderFindings(data.findings);
    const best = [["best by eval", data.best_by_eval], ["best by reward per minute", data.best_by_reward_per_minute]];
    say(best.filter(([, id]) => id).map(([label, id]) => `${label}: ${id}`).join(" · "));
  }

  async function refreshComparison(runIds, fallback) {
    if (!hostCaps.serverResources) {
      const rows = (curve, key) => (curve || []).map(([step, value]) => ({ step, [key]: value }));
      drawRuns(fallback.map((r) => ({
        name: r.run_id,
        doc: { history: rows(r.reward_curve, "reward_mean"), evals: rows(r.eval_curve, "eval_accuracy") },
      })));
      return null;
    }
    const docs = await Promise.all(runIds.map((id) => readJson(`rl://runs/${id}/metrics`)));
    drawRuns(runIds.map((id, i) => ({ name: id, doc: docs[i] })));
    return docs.some((d) => ACTIVE.has(d.status)) ? POLL_MS : null;
  }

  // --- polling -----------------------------------------------------------------------------------
  async function refresh() {
    clearTimeout(timer);
    if (!shown) return;
    const round = ++rounds; // a newer refresh (a stop, a new result) supersedes this one's next poll
    let next;
    try {
      next = shown.kind === "run" ? await refreshRun(shown.runId) : await refreshComparison(shown.runIds, shown.fallback);
    } catch (err) {
      say(`could not update: ${err.message}`, true);
      next = POLL_MS * 2;
    }
    if (next != null && round === rounds) timer = setTimeout(refresh, next);
  }

  // --- rendering ---------------------------------------------------------------------------------
  function say(text, isError = false) {
    $("message").textContent = text;
    $("message").classList.toggle("error", isError);
  }

  function facts(pairs) {
    $("facts").replaceChildren(...pairs.map(([label, value]) => {
      const item = document.createElement("div");
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = label;
      dd.textContent = value;
      item.append(dt, dd);
      return item;
    }));
  }

  function renderFindings(list) {
    const items = Array.isArray(list) ? list : [];
    $("findings-box").hidden = items.length === 0;
    $("findings").replaceChildren(...items.map((f) => {
      const li = document.createElement("li");
      if (f && typeof f === "object") {
        const level = f.severity || f.level || f.kind;
        if (level) {
          const tag = document.createElement("span");
          tag.className = `level level-${level}`;
          tag.textContent = level;
          li.append(tag);
        }
        li.append(f.title || f.message || f.summary || f.text || JSON.stringify(f));
        const evidence = Array.isArray(f.evidence) ? f.evidence.map((e) => e.summary || "").filter(Boolean) : [];
        if (evidence.length) li.append(`: ${evidence.join("; ")}`);
        const next = f.next_step || f.hint;
        const hint = next && typeof next === "object" ? `${next.why || ""} (${next.tool || "?"})` : next;
        if (hint) {
          const small = document.createElement("span");
          small.className = "hint";
          small.textContent = ` — ${hint}`;
          li.append(small);
        }
      } else {
        li.textContent = String(f);
      }
      return li;
    }));
  }

  function num(v) {
    if (v == null) return "–";
    if (v !== 0 && Math.abs(v) < 0.001) return v.toExponential(1);
    return Math.abs(v) >= 100 ? v.toFixed(0) : String(Number(v.toPrecision(3)));
  }
  const pct = (v) => `${(100 * v).toFixed(1)} %`;
  function duration(s) {
    if (s == null) return "–";
    if (s < 60) return `${Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  }

  const points = (rows, key) => (rows || [])
    .filter((r) => typeof r.step === "number" && typeof r[key] === "number")
    .map((r) => [r.step, r[key]]);

  function drawRuns(runs) {
    const series = (key, rows) => runs.map((r, i) => ({ color: COLORS[i % COLORS.length], points: points(r.doc[rows], key) }));
    chart("chart-reward", series("reward_mean", "history"));
    chart("chart-eval", series("eval_accuracy", "evals"));
    chart("chart-loss", series("loss", "history"));
    $("legend").replaceChildren(...(runs.length > 1 ? runs.map((r, i) => {
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = COLORS[i % COLORS.length];
      item.append(swatch, r.name);
      return item;
    }) : []));
  }

  function svgEl(parent, tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  }

  function chart(id, series) {
    const svg = $(id);
    const [W, H, L, R, T, B] = [300, 150, 44, 8, 8, 18];
    const all = series.flatMap((s) => s.points);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.dataset.points = String(all.length);
    svg.replaceChildren();
    svgEl(svg, "path", { d: `M${L},${T}V${H - B}H${W - R}`, class: "axis" });
    if (all.length === 0) {
      svgEl(svg, "text", { x: (L + W) / 2, y: H / 2, "text-anchor": "middle" }, "no data yet");
      return;
    }
    const xs = all.map((p) => p[0]);
    const ys = all.map((p) => p[1]);
    let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) [y0, y1] = [y0 - 0.5, y1 + 0.5];
    const sx = (x) => (L + ((x - x0) / (x1 - x0)) * (W - L - R)).toFixed(1);
    const sy = (y) => (H - B - ((y - y0) / (y1 - y0)) * (H - T - B)).toFixed(1);
    svgEl(svg, "text", { x: L - 3, y: T + 8, "text-anchor": "end" }, num(y1));
    svgEl(svg, "text", { x: L - 3, y: H - B, "text-anchor": "end" }, num(y0));
    svgEl(svg, "text", { x: L, y: H - 4 }, `step ${x0}`);
    svgEl(svg, "text", { x: W - R, y: H - 4, "text-anchor": "end" }, `${x1}`);
    for (const s of series) {
      if (s.points.length === 0) continue;
      const coords = s.points.map((p) => `${sx(p[0])},${sy(p[1])}`);
      svgEl(svg, "polyline", { points: coords.join(" "), class: "line", stroke: s.color });
      const [lx, ly] = coords[coords.length - 1].split(",");
      svgEl(svg, "circle", { cx: lx, cy: ly, r: 2.5, fill: s.color });
    }
  }

  // --- start: the handshake, then size reports ----------------------------------------------------
  async function start() {
    try {
      const init = await request("ui/initialize", {
        protocolVersion: PROTOCOL,
        appInfo: { name: "rl-mcp run view", version: "1" },
        appCapabilities: { availableDisplayModes: ["inline"] },
      });
      hostCaps = init.hostCapabilities || {};
      applyContext(init.hostContext || {});
      notify("ui/notifications/initialized", {});
    } catch (err) {
      say(`the host did not start the view: ${err.message}`, true);
    }
    new ResizeObserver(() => {
      const box = document.body.getBoundingClientRect();
      notify("ui/notifications/size-changed", { width: Math.ceil(box.width), height: Math.ceil(box.height) });
    }).observe(document.body);
  }
  start();
})();
