// kubemux dashboard: live tables over server-sent events.
//
// Safety rule: everything that comes from a cluster or a kubeconfig is put into the page with
// textContent (through el() and text()), never as HTML. There is no innerHTML in this file.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ DOM helpers
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (value === undefined || value === null) continue;
        if (key === "className") node.className = value;
        else if (key === "dataset") Object.assign(node.dataset, value);
        else if (key === "title") node.title = value;
        else if (key === "href") node.setAttribute("href", value);
        else node.setAttribute(key, value);
      }
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function text(node, value) {
    const s = value === undefined || value === null ? "" : String(value);
    if (node.textContent !== s) node.textContent = s;
  }

  function objectHref(context, resource, namespace, name) {
    const params = new URLSearchParams({ context, resource, namespace, name });
    return "object?" + params.toString();
  }

  // A colour per context: a fixed palette of 20 distinct colours, given out in sorted-name
  // order of the contexts known (so two contexts never share one while there are 20 or
  // fewer); beyond 20, a stable hue from the name (FNV-1a, spread by the golden ratio).
  // Every dot of a context (cards, filter chips, rows) carries its name and is recoloured
  // when the set of contexts changes, so a context has one colour everywhere.
  const PALETTE = [
    "#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4",
    "#42d4f4", "#f032e6", "#9a6324", "#469990", "#800000",
    "#bfef45", "#000075", "#808000", "#ffe119", "#fabed4",
    "#dcbeff", "#aaffc3", "#ffd8b1", "#a9a9a9", "#1d2330",
  ];
  const colours = new Map(); // context -> palette colour

  function hue(name) {
    let h = 0x811c9dc5;
    for (const byte of new TextEncoder().encode(name)) {
      h = Math.imul(h ^ byte, 16777619) >>> 0;
    }
    return Math.floor(((h * 0.618033988749895) % 1) * 360);
  }

  function colourOf(name) {
    return colours.get(name) || "hsl(" + hue(name) + " 65% 50%)";
  }

  // Give out the palette for these context names; true if a colour changed.
  function assignColours(names) {
    const sorted = [...new Set(names)].sort();
    let changed = sorted.length !== colours.size;
    const next = new Map();
    sorted.slice(0, PALETTE.length).forEach((name, i) => {
      next.set(name, PALETTE[i]);
      if (colours.get(name) !== PALETTE[i]) changed = true;
    });
    if (!changed) return false;
    colours.clear();
    for (const [name, colour] of next) colours.set(name, colour);
    for (const d of document.querySelectorAll(".dot[data-ctx]")) {
      d.style.setProperty("--ctx-colour", colourOf(d.dataset.ctx));
    }
    return true;
  }

  function dot(name) {
    const d = el("span", { className: "dot", "aria-hidden": "true", dataset: { ctx: name } });
    d.style.setProperty("--ctx-colour", colourOf(name));
    return d;
  }

  // ------------------------------------------------------------------ time
  function age(iso) {
    if (!iso) return "";
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    return duration((Date.now() - t) / 1000);
  }

  function duration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 120) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 120) return m + "m";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h";
    return Math.floor(h / 24) + "d";
  }

  function statusClass(status) {
    const s = (status || "").toLowerCase();
    if (!s) return "";
    if (["running", "ready", "succeeded", "completed", "active", "bound"].includes(s)) {
      return s === "succeeded" || s === "completed" ? "st-done" : "st-ok";
    }
    if (["pending", "containercreating", "terminating", "podinitializing"].includes(s)) {
      return "st-warn";
    }
    if (s.startsWith("normal")) return "st-ok";
    return "st-bad";
  }

  // ------------------------------------------------------------------ connection badge
  function setConn(state, label) {
    const conn = $("conn");
    conn.className = "conn conn-" + state;
    text(conn, label);
  }

  // ------------------------------------------------------------------ banners
  const banners = new Map(); // key -> element

  function setBanner(key, message, kind) {
    let node = banners.get(key);
    if (!message) {
      if (node) node.remove();
      banners.delete(key);
      return;
    }
    if (!node) {
      node = el("div", { className: "banner", role: "alert" });
      banners.set(key, node);
      $("banners").append(node);
    }
    node.className = "banner banner-" + (kind || "error");
    text(node, message);
  }

  function setBanners(prefix, entries) {
    const wanted = new Set();
    for (const [key, message] of entries) {
      wanted.add(prefix + key);
      setBanner(prefix + key, message, "error");
    }
    for (const key of [...banners.keys()]) {
      if (key.startsWith(prefix) && !wanted.has(key)) setBanner(key, null);
    }
  }

  // ------------------------------------------------------------------ event stream
  // EventSource reconnects by itself after a dropped connection; every new connection starts
  // with a `reset` and a snapshot, so the page resynchronises without a reload. When the
  // server answered with an error (the stream is CLOSED), reconnect by hand.
  function connect(url, handlers) {
    let source = null;
    let timer = null;
    let stopped = false;
    let opened = 0;
    const open = () => {
      timer = null;
      source = new EventSource(url);
      source.addEventListener("open", () => {
        setConn("live", "live");
        opened += 1;
        if (opened > 1) logActivity("reconnected: resynchronising", "info");
      });
      source.addEventListener("error", () => {
        if (stopped) return;
        if (source.readyState === EventSource.CLOSED && session.on) checkSession();
        if (source.readyState === EventSource.CLOSED) {
          setConn("down", "disconnected, retrying…");
          timer = setTimeout(open, 2000);
        } else {
          setConn("connecting", "reconnecting…");
        }
      });
      for (const [name, handler] of Object.entries(handlers)) {
        source.addEventListener(name, (ev) => handler(JSON.parse(ev.data)));
      }
      source.addEventListener("problem", (ev) => {
        const data = JSON.parse(ev.data);
        // a resource no context serves: one banner of its own (the table says it too)
        if (data.kind === "resource") setBanner("resource", data.message, "error");
        else setBanner("stream", data.message, data.fatal ? "error" : "warn");
        if (data.fatal) {
          stop();
          setConn("down", "stopped");
        }
      });
    };
    const stop = () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (source) source.close();
    };
    open();
    return { stop };
  }

  // ------------------------------------------------------------------ contexts panel
  // Cards for up to COMPACT_AFTER contexts; beyond, a compact list (name and state) that a
  // toggle expands. lastEvent: when this page last received a live change of the shown
  // resource from each context (the server's status has the time of the last full LIST).
  const COMPACT_AFTER = 6;
  const contextsState = {
    previous: null,
    cards: new Map(),
    expanded: false,
    resource: "",
    lastEvent: new Map(), // context -> ms
  };

  function logActivity(message, kind) {
    const list = $("activity");
    if (!list) return;
    const now = new Date();
    const item = el(
      "li",
      { className: "act act-" + (kind || "info") },
      el("time", { datetime: now.toISOString() }, now.toLocaleTimeString()),
      " ",
      message,
    );
    list.prepend(item);
    while (list.children.length > 12) list.lastElementChild.remove();
  }

  // The server sends the whole panel first, then only the contexts that changed
  // ({changed, removed, order?}: a changed item replaces the one of its name); this holds it.
  function panelModel() {
    return { order: [], items: new Map(), extras: { kubeconfig_errors: {}, invalid_contexts: {}, kubeconfig_syncs: 0 } };
  }

  // Apply a `contexts` event; what changed: {all, changed: [names], removed: [names], reordered}.
  function applyPanel(model, data) {
    for (const key of Object.keys(model.extras)) if (key in data) model.extras[key] = data[key];
    if (data.contexts) {
      const before = model.order;
      model.items = new Map(data.contexts.map((c) => [c.name, c]));
      model.order = data.contexts.map((c) => c.name);
      return { all: true, changed: model.order, removed: before.filter((n) => !model.items.has(n)), reordered: true };
    }
    const changed = [];
    for (const item of data.changed || []) {
      model.items.set(item.name, item);
      changed.push(item.name);
    }
    const removed = [];
    for (const name of data.removed || []) if (model.items.delete(name)) removed.push(name);
    if (data.order) model.order = data.order.filter((n) => model.items.has(n));
    else if (removed.length) model.order = model.order.filter((n) => model.items.has(n));
    for (const name of changed) if (!model.order.includes(name)) model.order.push(name);
    return { all: false, changed, removed, reordered: Boolean(data.order || removed.length) };
  }

  function noteContextChanges(model, diff) {
    const before = contextsState.previous;
    if (before) {
      for (const name of diff.changed) {
        const c = model.items.get(name);
        const old = before.get(name);
        if (!c) continue;
        if (!old) {
          logActivity("context " + name + " added", "add");
        } else if (old.generation && c.generation && old.generation !== c.generation) {
          logActivity("context " + name + " reloaded (generation " + c.generation + ")", "reload");
        } else if (old.state !== c.state && ["backing off", "error"].includes(c.state)) {
          logActivity("context " + name + ": " + c.state, "error");
        }
      }
      const gone = diff.all ? [...before.keys()].filter((n) => !model.items.has(n)) : diff.removed;
      for (const name of gone) {
        if (before.has(name)) logActivity("context " + name + " removed", "remove");
      }
    } else {
      const n = model.order.length;
      logActivity("watching " + n + (n === 1 ? " context" : " contexts"), "info");
    }
    const now = diff.all || !before ? new Map() : before;
    for (const name of diff.all || !before ? model.order : diff.changed) {
      const c = model.items.get(name);
      if (c) now.set(name, { generation: c.generation, state: c.state });
    }
    for (const name of diff.removed) now.delete(name);
    contextsState.previous = now;
  }

  const LISTED_HELP = "listed: when the context's informers last completed a full LIST " +
    "(the server's status; a LIST happens at start, after a reload and after a watch expired)";
  const EVENT_HELP = "last event: when this page last received a live change " +
    "(added, modified or deleted) of the shown resource from this context, not counting " +
    "the rows of a LIST";

  function contextCard(c) {
    const card = el("article", { className: "card", dataset: { context: c.name } });
    const head = el("div", { className: "card-head" });
    const name = el("span", { className: "ctx-name" });
    const current = el("span", { className: "badge badge-current" }, "current");
    const state = el("span", { className: "badge state" });
    head.append(dot(c.name), name, current, state);
    const where = el("div", { className: "card-where muted" });
    const counts = el("div", { className: "card-counts" });
    const listed = el("span", { className: "listed", title: LISTED_HELP });
    const lastEvent = el("span", { className: "last-event", title: EVENT_HELP });
    const sync = el("div", { className: "card-sync muted" }, listed, " · ", lastEvent);
    const error = el("div", { className: "card-error" });
    card.append(head, where, counts, sync, error);
    card._parts = { name, current, state, where, counts, listed, lastEvent, error };
    return card;
  }

  function fillCard(card, c) {
    const p = card._parts;
    const resource = contextsState.resource;
    text(p.name, c.name);
    p.current.hidden = !c.current;
    text(p.state, c.state);
    p.state.className = "badge state state-" + c.state.replace(/\s+/g, "-");
    const where = [c.server, c.user_name && "user " + c.user_name, c.namespace && "ns " + c.namespace];
    text(p.where, where.filter(Boolean).join(" · "));
    p.where.title = c.source ? "from " + c.source : "";
    const parts = [];
    const names = Object.keys(c.objects).sort((a, b) =>
      a === resource ? -1 : b === resource ? 1 : a.localeCompare(b),
    );
    for (const res of names) parts.push(c.objects[res] + " " + res);
    // objects skipped (malformed, or refused by a transform): how many, and the latest why
    if (c.skipped) parts.push(c.skipped.count + " skipped (latest: " + c.skipped.latest + ")");
    text(p.counts, parts.join(" · ") || "no watchers yet");
    card.dataset.lastSync = c.last_sync ? String(c.last_sync) : "";
    card._item = c;
    renderSync(card);
    card.classList.toggle("card-bad", Boolean(c.last_error));
  }

  // "listed N ago" (the last full LIST) and "last <resource> event N ago" (this page's last
  // live change from the context), each with a tooltip saying which it is.
  function renderSync(card) {
    const p = card._parts;
    const c = card._item;
    // the retry countdown from the time the server gave (nothing is sent as it counts down)
    let err = (c && c.last_error) || "";
    if (err && c.retry_at) err += " (retry in " + Math.max(0, Math.ceil(c.retry_at - Date.now() / 1000)) + "s)";
    text(p.error, err);
    p.error.hidden = !err;
    const last = Number(card.dataset.lastSync);
    text(p.listed, last ? "listed " + duration(Date.now() / 1000 - last) + " ago" : "not listed yet");
    const resource = contextsState.resource || "object";
    const seen = contextsState.lastEvent.get(card.dataset.context);
    text(
      p.lastEvent,
      seen
        ? "last " + resource + " event " + duration((Date.now() - seen) / 1000) + " ago"
        : "no " + resource + " event since the page opened",
    );
  }

  // Draw the panel after a `contexts` event (diff: what applyPanel says changed): only the
  // cards of the contexts that changed are filled again.
  function renderContexts(model, diff, onContexts) {
    noteContextChanges(model, diff);
    if (diff.reordered) assignColours(model.order);
    const box = $("contexts");
    for (const name of diff.changed) {
      const c = model.items.get(name);
      if (!c) continue;
      let card = contextsState.cards.get(name);
      if (!card) {
        card = contextCard(c);
        contextsState.cards.set(name, card);
      }
      fillCard(card, c);
    }
    if (diff.reordered) {
      for (const [name, card] of contextsState.cards) {
        if (!model.items.has(name)) {
          card.remove();
          contextsState.cards.delete(name);
          contextsState.lastEvent.delete(name);
        }
      }
      model.order.forEach((name, i) => {
        const card = contextsState.cards.get(name);
        if (card && box.children[i] !== card) box.insertBefore(card, box.children[i] || null);
      });
      if (!model.order.length) {
        if (!box.querySelector(".empty")) box.append(el("p", { className: "empty" }, "No contexts in the kubeconfig."));
      } else {
        const empty = box.querySelector(".empty");
        if (empty) empty.remove();
      }
      layoutContexts();
      if (onContexts) onContexts(model.order);
    }
    const extras = model.extras;
    text($("syncs"), extras.kubeconfig_syncs ? "kubeconfig synced " + extras.kubeconfig_syncs + "×" : "");
    setBanners(
      "kubeconfig:",
      Object.entries(extras.kubeconfig_errors).map(([file, e]) => [file, "kubeconfig " + file + ": " + e]),
    );
    setBanners(
      "invalid:",
      Object.entries(extras.invalid_contexts).map(([name, why]) => [name, "context " + name + " cannot be used: " + why]),
    );
  }

  // Refill every card (the resource shown changed: its count goes first).
  function refillCards(model) {
    for (const [name, card] of contextsState.cards) {
      const c = model.items.get(name);
      if (c) fillCard(card, c);
    }
  }

  function layoutContexts() {
    const many = contextsState.cards.size > COMPACT_AFTER;
    const toggle = $("contexts-toggle");
    toggle.hidden = !many;
    const compact = many && !contextsState.expanded;
    $("contexts").classList.toggle("compact", compact);
    toggle.setAttribute("aria-expanded", String(!compact));
    text(toggle, compact ? "show details" : "compact list");
  }

  $("contexts-toggle").addEventListener("click", () => {
    contextsState.expanded = !contextsState.expanded;
    layoutContexts();
  });

  // ------------------------------------------------------------------ the table
  // Each context sends the columns of its table view (the API server's, kubectl's) before
  // its rows; the table shows their union by name, in first-seen order (a column new to
  // the union goes before the next column of its own table that is already there, so Age
  // stays last), after CONTEXT and, for namespaced kinds, NAMESPACE. Wide columns
  // (priority > 0, kubectl's -o wide) only with the "wide" toggle.
  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
  const DURATION = /^(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;
  const ISO = /^\d{4}-\d\d-\d\dT/;

  function durationSeconds(value) {
    const m = DURATION.exec(value);
    if (!m || !value) return NaN;
    const [y, d, h, min, s] = m.slice(1).map((x) => Number(x || 0));
    return (((y * 365 + d) * 24 + h) * 60 + min) * 60 + s;
  }

  function cellText(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function slug(name) {
    return name.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
  }

  function isAge(col) {
    return col.name.toLowerCase() === "age";
  }

  function unionColumns(tables) {
    const out = [];
    const at = new Map(); // name -> column
    for (const columns of tables) {
      columns.forEach((col, i) => {
        if (at.has(col.name)) return;
        at.set(col.name, col);
        let before = -1;
        for (const later of columns.slice(i + 1)) {
          const where = out.findIndex((c) => c.name === later.name);
          if (where >= 0) {
            before = where;
            break;
          }
        }
        if (before >= 0) out.splice(before, 0, col);
        else out.push(col);
      });
    }
    return out;
  }

  // The rows live in a model (a Map and one sorted array), not in the DOM: a change costs
  // a binary search and an array splice, however many rows there are. The table shows a
  // window of the rows that pass the filters (the rows on screen, and some around them,
  // at least MIN_WINDOW), between two spacer rows as tall as the rows left out, drawn once
  // per animation frame whatever the number of changes in between. So 12,000 rows cost the
  // page what 150 do, and nothing reads the layout per row. Columns keep the widest width
  // they had (as kubectl's tabwriter remembers widths), so scrolling does not make them jump.
  const MIN_WINDOW = 100; // rows always drawn (when there are that many): small tables whole
  const OVERSCAN = 30; // rows drawn above and below the screen

  function tableView() {
    $("table-view").hidden = false;
    const params = new URLSearchParams(location.search);
    const resourceInput = $("resource");
    const namespaceInput = $("namespace");
    const filterInput = $("filter");
    const wideInput = $("wide");
    resourceInput.value = params.get("resource") || "pods";
    namespaceInput.value = params.get("namespace") || "";
    filterInput.value = params.get("q") || "";
    wideInput.checked = params.get("wide") === "1";
    const hidden = new Set(params.getAll("hide")); // contexts not shown
    const sortParam = params.get("sort") || "";
    const sort = { column: sortParam.replace(/^-/, "") || null, desc: sortParam.startsWith("-") };

    const table = $("rows");
    const thead = table.tHead;
    const tbody = table.tBodies[0];
    // key -> entry {key, context, namespace, name, row, at, stale, value, search, tr, flash}
    const rows = new Map();
    const byContext = new Map(); // context -> Set of its entries
    let order = []; // every entry, sorted
    let visible = []; // the entries that pass the filters, sorted
    let visibleDirty = true;
    const rowNamespaces = new Set();
    const columnSets = new Map(); // JSON of a column list -> {columns, index}: shared by contexts
    const columnsBy = new Map(); // context -> its column set
    const definitions = new Map(); // column set id -> columns, as the server defined them
    let shown = []; // the columns on screen: {name, kind, col}
    let resource = resourceInput.value.trim();
    let namespaced = true;
    let stream = null;
    let terms = [];
    let current = null; // the highlighted entry (j/k)
    let synced = false;
    let problem = null; // the resource no context serves, as the server said
    const listing = new Set(); // contexts whose next changes come from a LIST
    let served = null; // resource name -> discovery entry (every context's, merged)
    let rendered = []; // the entries drawn now, in order
    let drawn = []; // the nodes in the tbody now
    let rowHeight = 0; // measured from a drawn row (0: not yet)
    const minWidths = new Map(); // column name -> the widest its header has been (px)

    const keyOf = (c) => c.context + "\u0000" + c.namespace + "\u0000" + c.name;

    // ---------------------------------------------------------------- drawing
    let frame = 0;
    function schedule() {
      if (!frame) frame = requestAnimationFrame(render);
    }

    // Draw now: what a person did (a click, a key) shows before the next event.
    function flush() {
      if (frame) cancelAnimationFrame(frame);
      render();
    }

    function matches(entry) {
      if (hidden.has(entry.context)) return false;
      for (const t of terms) if (!entry.search.includes(t)) return false;
      return true;
    }

    function refreshVisible() {
      if (!visibleDirty) return;
      visibleDirty = false;
      visible = !terms.length && !hidden.size ? order : order.filter(matches);
      if (current && !matches(current)) current = null;
      updateCount();
    }

    function spacer(height) {
      const tr = el("tr", { className: "spacer", "aria-hidden": "true" }, el("td", { colspan: String(shown.length || 1) }));
      tr.style.height = height + "px";
      return tr;
    }

    function render() {
      frame = 0;
      refreshVisible();
      // read: where the table is (one layout per frame at most, before anything is written)
      if (!rowHeight && rendered.length && rendered[0].tr) {
        rowHeight = rendered[0].tr.getBoundingClientRect().height || 0;
      }
      const height = rowHeight || 30;
      const top = tbody.getBoundingClientRect().top;
      const first = Math.max(0, Math.floor(-top / height));
      const last = Math.ceil((window.innerHeight - top) / height);
      const n = visible.length;
      let start = Math.max(0, Math.min(first, n) - OVERSCAN);
      let end = Math.min(n, Math.max(last + OVERSCAN, start + MIN_WINDOW));
      if (end - start < MIN_WINDOW) start = Math.max(0, end - MIN_WINDOW);
      // write: the window's rows (built or refilled only where needed), the spacers
      const next = visible.slice(start, end);
      const keep = new Set(next);
      for (const entry of rendered) if (!keep.has(entry)) entry.tr = null;
      const nodes = [];
      if (start > 0) nodes.push(spacer(start * height));
      for (const entry of next) {
        if (!entry.tr) {
          entry.tr = el("tr", { dataset: { context: entry.context } });
          entry.filled = false;
        }
        if (!entry.filled) fillRow(entry);
        const tr = entry.tr;
        const isCurrent = entry === current;
        if (tr.classList.contains("current") !== isCurrent) {
          tr.classList.toggle("current", isCurrent);
          if (isCurrent) tr.setAttribute("aria-current", "true");
          else tr.removeAttribute("aria-current");
        }
        if (entry.flash) {
          // two animations of the same keyframes: switching restarts it, no layout read
          const on = entry.flip ? "flash-b" : "flash-a";
          tr.classList.remove(entry.flip ? "flash-a" : "flash-b");
          tr.classList.add(on);
          entry.flip = !entry.flip;
          entry.flash = false;
        }
        nodes.push(tr);
      }
      if (end < n) nodes.push(spacer((n - end) * height));
      if (nodes.length !== drawn.length || nodes.some((node, i) => node !== drawn[i])) {
        tbody.replaceChildren(...nodes);
        drawn = nodes;
      }
      rendered = next;
    }

    window.addEventListener("scroll", schedule, { passive: true });
    window.addEventListener("resize", () => {
      rowHeight = 0;
      schedule();
    });

    // Header cells keep the widest width they had: the rows drawn change as the page
    // scrolls, and auto-sized columns would jump with them. While the kept widths fit the
    // table's box; once they would not (a much wider cell came), they start over from the
    // widths the table has then, so no column is pushed out of sight.
    const widths = new ResizeObserver((seen) => {
      for (const item of seen) {
        const th = item.target;
        const width = Math.floor(item.borderBoxSize[0].inlineSize); // down: never wider than now
        if (width > (minWidths.get(th.dataset.column) || 0)) minWidths.set(th.dataset.column, width);
      }
      let total = 0;
      for (const s of shown) total += minWidths.get(s.name) || 0;
      const fits = total <= table.parentElement.clientWidth;
      if (!fits) minWidths.clear();
      for (const th of thead.querySelectorAll("th")) {
        const width = minWidths.get(th.dataset.column);
        th.style.minWidth = fits && width ? width + "px" : "";
      }
    });

    // ---------------------------------------------------------------- columns
    function layout() {
      const union = unionColumns([...new Set(columnsBy.values())].map((set) => set.columns));
      if (!union.some((c) => c.format === "name")) {
        union.unshift({ name: "Name", type: "string", format: "name", description: "", priority: 0 });
      }
      const info = served && served.get(resource);
      const withNamespace = info ? info.namespaced : namespaced;
      const next = [{ name: "Context", kind: "context", col: { type: "string", description: "The kubeconfig context." } }];
      if (withNamespace) {
        next.push({ name: "Namespace", kind: "namespace", col: { type: "string", description: "The object's namespace." } });
      }
      for (const col of union) {
        if (col.priority > 0 && !wideInput.checked) continue;
        if (withNamespace && col.name === "Namespace") continue;
        next.push({ name: col.name, kind: col.format === "name" ? "name" : "cell", col });
      }
      const same = next.length === shown.length &&
        next.every((s, i) => s.name === shown[i].name && s.col.type === shown[i].col.type);
      shown = next;
      if (same) return false;
      minWidths.clear(); // widths kept for other columns
      renderHead();
      for (const entry of rendered) entry.tr = null; // drawn again with the new columns
      rendered = [];
      if (sort.column) resort();
      schedule();
      return true;
    }

    function renderHead() {
      widths.disconnect();
      const tr = el("tr");
      for (const s of shown) {
        const numeric = s.col.type === "integer" || s.col.type === "number";
        const button = el("button", { type: "button", className: "sort", title: s.col.description || null }, s.name);
        const th = el("th", { scope: "col", className: "col-" + slug(s.name) + (numeric ? " num" : ""), dataset: { column: s.name } }, button);
        th.setAttribute("aria-sort", sort.column === s.name ? (sort.desc ? "descending" : "ascending") : "none");
        const width = minWidths.get(s.name);
        if (width) th.style.minWidth = width + "px";
        button.addEventListener("click", () => {
          if (sort.column === s.name) sort.desc = !sort.desc;
          else {
            sort.column = s.name;
            sort.desc = false;
          }
          syncUrl();
          renderHead();
          resort();
          flush();
        });
        tr.append(th);
        widths.observe(th);
      }
      thead.replaceChildren(tr);
    }

    // ---------------------------------------------------------------- rows
    function cellOf(entry, name) {
      const set = columnsBy.get(entry.context);
      const i = set ? set.index.get(name) : undefined;
      return i === undefined ? undefined : entry.row.cells[i];
    }

    // What the filter box looks through: context, namespace, name, every cell (wide ones
    // too), labels. Kept on the entry: filtering reads no DOM.
    function searchText(entry) {
      const parts = [entry.context, entry.namespace, entry.name];
      for (const value of entry.row.cells || []) parts.push(cellText(value));
      for (const [k, v] of Object.entries(entry.row.labels || {})) parts.push(k + "=" + v);
      return parts.join(" ").toLowerCase();
    }

    function fillRow(entry) {
      const r = entry.row;
      const tr = entry.tr;
      entry.ages = [];
      const tds = shown.map((s) => {
        const numeric = s.col.type === "integer" || s.col.type === "number";
        const td = el("td", { className: "col-" + slug(s.name) + (numeric ? " num" : "") });
        if (s.kind === "context") {
          td.append(dot(entry.context), el("span", null, entry.context));
          return td;
        }
        if (s.kind === "namespace") {
          td.textContent = entry.namespace;
          return td;
        }
        const value = cellOf(entry, s.name);
        if (s.kind === "name") {
          const link = el("a", { href: objectHref(entry.context, resource, entry.namespace, entry.name) });
          link.textContent = cellText(value) || entry.name;
          td.append(link);
          return td;
        }
        const shownText = cellText(value);
        let iso = null;
        if (isAge(s.col) && r.created) iso = r.created;
        else if (typeof value === "string" && ISO.test(value) && (s.col.type === "date" || isAge(s.col))) iso = value;
        if (iso) {
          td.dataset.time = iso;
          td.title = iso;
          entry.ages.push(td);
          td.textContent = age(iso);
        } else {
          td.textContent = shownText;
        }
        if (s.name.toLowerCase() === "status") td.className = "col-status " + statusClass(shownText);
        return td;
      });
      tr.replaceChildren(...tds);
      tr.title = Object.entries(r.labels || {}).map(([k, v]) => k + "=" + v).join("\n");
      entry.filled = true;
    }

    // ---------------------------------------------------------------- sorting
    // The sort value of a row in the sorted column: numbers for numeric columns (a cell
    // like "3 (5m ago)" counts as 3), a time for ages and dates (the creation time, or
    // when the row came minus the age the server printed), else text, compared naturally.
    function sortValue(entry) {
      const s = shown.find((x) => x.name === sort.column);
      if (!s) return "";
      if (s.kind === "context") return entry.context;
      if (s.kind === "namespace") return entry.namespace;
      const value = cellOf(entry, s.name);
      if (s.kind === "name") return cellText(value) || entry.name;
      const type = s.col.type;
      if (type === "integer" || type === "number") {
        const n = parseFloat(cellText(value));
        return Number.isNaN(n) ? "" : n;
      }
      if (isAge(s.col) || type === "date") {
        const iso = isAge(s.col) && entry.row.created ? entry.row.created : value;
        if (typeof iso === "string" && ISO.test(iso)) {
          const t = Date.parse(iso);
          if (!Number.isNaN(t)) return -t; // ascending: the youngest first
        }
        const seconds = durationSeconds(cellText(value));
        if (!Number.isNaN(seconds)) return seconds * 1000 - entry.at;
      }
      return cellText(value);
    }

    function compare(a, b) {
      if (sort.column) {
        const x = a.value;
        const y = b.value;
        let c = 0;
        if (x === "" || y === "") c = x === y ? 0 : x === "" ? 1 : -1; // empty cells last
        else if (typeof x === "number" && typeof y === "number") c = x - y;
        else if (typeof x === "number") c = -1;
        else if (typeof y === "number") c = 1;
        else c = collator.compare(x, y);
        if (c !== 0) return sort.desc && x !== "" && y !== "" ? -c : c;
      }
      return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    }

    function position(entry) {
      let lo = 0;
      let hi = order.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (compare(order[mid], entry) < 0) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    }

    function place(entry) {
      const i = position(entry);
      if (i === order.length) order.push(entry);
      else order.splice(i, 0, entry);
    }

    function unplace(entry) {
      const i = position(entry);
      if (order[i] === entry) order.splice(i, 1);
      else order.splice(order.indexOf(entry), 1); // not where its value says: look
    }

    function resort() {
      for (const entry of order) entry.value = sortValue(entry);
      order.sort(compare);
      visibleDirty = true;
      schedule();
    }

    // ---------------------------------------------------------------- changes
    function upsert(c, live) {
      const key = keyOf(c);
      let entry = rows.get(key);
      if (!entry) {
        entry = { key, context: c.context, namespace: c.namespace, name: c.name, tr: null, flip: false };
        rows.set(key, entry);
        let mine = byContext.get(c.context);
        if (!mine) byContext.set(c.context, (mine = new Set()));
        mine.add(entry);
        if (c.namespace && !rowNamespaces.has(c.namespace)) {
          rowNamespaces.add(c.namespace);
          namespacesDirty = true;
        }
      } else {
        unplace(entry);
      }
      entry.row = c.row;
      entry.at = Date.now();
      entry.stale = false;
      entry.search = searchText(entry);
      entry.value = sortValue(entry);
      entry.filled = false;
      entry.flash = live; // a live change flashes; the rows of a LIST do not
      place(entry);
      visibleDirty = true;
    }

    function removeEntry(entry) {
      if (current === entry) current = null;
      unplace(entry);
      rows.delete(entry.key);
      const mine = byContext.get(entry.context);
      if (mine) {
        mine.delete(entry);
        if (!mine.size) byContext.delete(entry.context);
      }
      visibleDirty = true;
    }

    function removeContext(context) {
      const mine = byContext.get(context);
      if (!mine) return;
      byContext.delete(context);
      for (const entry of mine) rows.delete(entry.key);
      if (current && current.context === context) current = null;
      order = order.filter((entry) => entry.context !== context);
      visibleDirty = true;
    }

    // A context's columns: contexts with the same columns share one set; the layout
    // changes only if the union does, and only that context's rows are filled again
    // (none, usually: its columns come before its rows).
    function setColumns(context, columns) {
      const json = JSON.stringify(columns);
      const before = columnsBy.get(context);
      if (before && before.json === json) return;
      let set = columnSets.get(json);
      if (!set) {
        set = { json, columns, index: new Map(columns.map((col, i) => [col.name, i])) };
        columnSets.set(json, set);
      }
      columnsBy.set(context, set);
      if (layout()) return; // every row is drawn again
      const mine = byContext.get(context);
      if (!mine) return;
      for (const entry of mine) {
        entry.search = searchText(entry);
        entry.filled = false;
      }
      visibleDirty = true;
      if (sort.column) resort();
      schedule();
    }

    function forgetColumns(context) {
      if (!columnsBy.delete(context)) return;
      const inUse = new Set(columnsBy.values());
      for (const [json, set] of columnSets) if (!inUse.has(set)) columnSets.delete(json);
      layout();
    }

    function updateCount() {
      const total = rows.size;
      const count = visible.length;
      text($("count"), count === total ? total + " " + resource : count + " of " + total + " " + resource);
      const empty = $("empty");
      empty.hidden = count > 0;
      if (problem) text(empty, problem);
      else if (!total) text(empty, synced ? "No " + resource + "." : "Waiting for objects…");
      else text(empty, "No " + resource + " match the filter.");
    }

    const panel = panelModel();
    let pendingPanel = null; // what changed since the panel was last drawn
    let contextsFrame = 0;
    const handlers = {
      reset(data) {
        synced = false;
        problem = null;
        setBanner("resource", null);
        for (const entry of rows.values()) entry.stale = true;
        if (data.title) {
          text($("title"), data.title);
          document.title = data.title;
        }
        if (data.resource) resource = data.resource;
        if (contextsState.resource !== resource) {
          contextsState.resource = resource;
          refillCards(panel);
        }
        namespaced = data.namespaced !== false;
        layout();
        visibleDirty = true;
        schedule();
      },
      problem(data) {
        if (data.kind === "resource") {
          problem = data.message;
          visibleDirty = true;
          schedule();
        }
      },
      synced() {
        for (const entry of [...rows.values()]) if (entry.stale) removeEntry(entry);
        synced = true;
        visibleDirty = true;
        schedule();
      },
      columns(data) {
        // a set of columns comes whole once per snapshot, then by its id
        if (data.columns && data.id) definitions.set(data.id, data.columns);
        if (!data.context) return; // a definition only
        const columns = data.columns || definitions.get(data.id);
        if (!columns) return; // never sent: the context's rows keep the columns they had
        setColumns(data.context, columns);
        // after the snapshot, a context's columns come right before the rows of its LIST
        // (it synced later, was reloaded, or its columns changed): not events
        if (synced) listing.add(data.context);
      },
      changes(batch) {
        const now = Date.now();
        for (const c of batch) {
          if (c.type === "ADDED" || c.type === "MODIFIED") upsert(c, synced && !listing.has(c.context));
          else if (c.type === "DELETED") {
            const entry = rows.get(keyOf(c));
            if (entry) removeEntry(entry);
          } else if (c.type === "RESET" || c.type === "REMOVED") {
            removeContext(c.context);
            if (c.type === "REMOVED") forgetColumns(c.context);
          }
          if (synced && !listing.has(c.context) && ["ADDED", "MODIFIED", "DELETED"].includes(c.type)) {
            contextsState.lastEvent.set(c.context, now);
          }
        }
        listing.clear();
        if (namespacesDirty) renderNamespaces();
        schedule();
      },
      contexts(data) {
        // applied now, drawn once per frame (what changed since the last drawing)
        const diff = applyPanel(panel, data);
        if (!pendingPanel) pendingPanel = diff;
        else {
          pendingPanel.all = pendingPanel.all || diff.all;
          pendingPanel.changed = [...new Set([...pendingPanel.changed, ...diff.changed])];
          pendingPanel.removed = [...pendingPanel.removed, ...diff.removed];
          pendingPanel.reordered = pendingPanel.reordered || diff.reordered;
        }
        if (!contextsFrame) {
          contextsFrame = requestAnimationFrame(() => {
            contextsFrame = 0;
            const drawn = pendingPanel;
            pendingPanel = null;
            if (drawn) renderContexts(panel, drawn, renderContextFilter);
          });
        }
      },
    };

    function start() {
      if (stream) stream.stop();
      setBanner("stream", null);
      rows.clear();
      byContext.clear();
      order = [];
      visible = [];
      rendered = [];
      drawn = [];
      tbody.replaceChildren();
      columnsBy.clear();
      columnSets.clear();
      minWidths.clear();
      current = null;
      synced = false;
      visibleDirty = true;
      resource = resourceInput.value.trim() || "pods";
      contextsState.resource = resource;
      contextsState.lastEvent.clear();
      refillCards(panel);
      layout();
      const query = new URLSearchParams({ resource });
      const ns = namespaceInput.value.trim();
      if (ns) query.set("namespace", ns);
      stream = connect("api/stream?" + query.toString(), handlers);
      updateCount();
      if (!served) discover(); // the pickers; the stream says if no context serves it
    }

    // ---------------------------------------------------------------- context filter
    let filterNames = "";
    function renderContextFilter(names) {
      const joined = names.join("\u0000");
      if (joined === filterNames) return;
      filterNames = joined;
      const box = $("ctx-filter");
      const chips = names.map((name) => {
        const box = el("input", { type: "checkbox", dataset: { context: name } });
        box.checked = !hidden.has(name);
        return el("label", { className: "ctx-chip", title: name }, box, dot(name), el("span", null, name));
      });
      box.replaceChildren(...chips);
      $("ctx-filter-box").hidden = names.length < 2;
    }

    // one listener for every chip (a thousand contexts, a thousand chips)
    $("ctx-filter").addEventListener("change", (ev) => {
      const box = ev.target;
      if (!(box instanceof HTMLInputElement) || !box.dataset.context) return;
      if (box.checked) hidden.delete(box.dataset.context);
      else hidden.add(box.dataset.context);
      refilter();
      syncUrl();
    });

    $("ctx-all").addEventListener("click", () => {
      hidden.clear();
      for (const box of $("ctx-filter").querySelectorAll("input")) box.checked = true;
      refilter();
      syncUrl();
    });

    // ---------------------------------------------------------------- pickers
    // What the watched contexts serve (discovery, merged by the server) for the resource
    // picker (a name none serves: the stream says so, with close names).
    let discoveredAt = 0;
    async function discover() {
      discoveredAt = Date.now();
      try {
        const answer = await fetch("api/resources");
        if (!answer.ok) return;
        const body = await answer.json();
        const list = body.resources;
        if (body.pending.length) setTimeout(discover, 1000); // being asked: again soon
        if (!list.length) return;
        served = new Map(list.map((r) => [r.name, r]));
        $("resources").replaceChildren(
          ...list.map((r) => el("option", { value: r.name, label: r.kind + " · " + contextsLabel(r.contexts) })),
        );
        layout();
      } catch (err) {
        served = null; // the static list stays
      }
    }

    // "a, b" or, for many, "a, b and 998 more"
    function contextsLabel(names) {
      return names.length <= 3 ? names.join(", ") : names.slice(0, 2).join(", ") + " and " + (names.length - 2) + " more";
    }

    let clusterNamespaces = new Map(); // name -> contexts
    let namespacesDirty = false;
    function renderNamespaces() {
      namespacesDirty = false;
      const names = new Set([...clusterNamespaces.keys(), ...rowNamespaces]);
      $("namespaces").replaceChildren(
        ...[...names].sort().map((ns) => {
          const where = clusterNamespaces.get(ns);
          return el("option", { value: ns, label: where ? ns + " · " + contextsLabel(where) : ns });
        }),
      );
    }

    let namespacesAt = 0;
    async function loadNamespaces() {
      if (Date.now() - namespacesAt < 5000) return;
      namespacesAt = Date.now();
      try {
        const answer = await fetch("api/namespaces");
        if (!answer.ok) return;
        const body = await answer.json();
        clusterNamespaces = new Map(body.namespaces.map((n) => [n.name, n.contexts]));
        renderNamespaces();
        if (body.pending.length) {
          // the server asks those contexts in the background: ask again soon
          namespacesAt = 0;
          setTimeout(loadNamespaces, 1000);
        }
      } catch (err) {
        // the namespaces seen in rows stay
      }
    }

    function syncUrl() {
      const query = new URLSearchParams();
      const res = resourceInput.value.trim();
      if (res && res !== "pods") query.set("resource", res);
      if (namespaceInput.value.trim()) query.set("namespace", namespaceInput.value.trim());
      if (filterInput.value.trim()) query.set("q", filterInput.value.trim());
      if (wideInput.checked) query.set("wide", "1");
      if (sort.column) query.set("sort", (sort.desc ? "-" : "") + sort.column);
      for (const name of hidden) query.append("hide", name);
      const qs = query.toString();
      history.replaceState(null, "", qs ? "?" + qs : location.pathname);
    }

    function refilter() {
      terms = filterInput.value.toLowerCase().split(/\s+/).filter(Boolean);
      visibleDirty = true;
      flush();
    }

    // ---------------------------------------------------------------- keyboard
    // "/" focuses the filter, j/k move the highlighted row, Enter opens it; never while
    // typing in a field.
    function highlight(entry) {
      current = entry;
      if (entry) {
        // the row's place is known without drawing it: scroll there if it is off screen
        const i = visible.indexOf(entry);
        const height = rowHeight || 30;
        const top = tbody.getBoundingClientRect().top + i * height;
        if (top < 0) window.scrollBy(0, top);
        else if (top + height > window.innerHeight) window.scrollBy(0, top + height - window.innerHeight);
      }
      flush();
    }

    function move(step) {
      refreshVisible();
      if (!visible.length) return;
      const i = current ? visible.indexOf(current) : -1;
      const next = i < 0 ? (step > 0 ? 0 : visible.length - 1) : Math.min(visible.length - 1, Math.max(0, i + step));
      highlight(visible[next]);
    }

    function typing(target) {
      if (!target || !(target instanceof Element)) return false;
      return target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName);
    }

    document.addEventListener("keydown", (ev) => {
      if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) return;
      if (ev.key === "/") {
        ev.preventDefault();
        filterInput.focus();
        filterInput.select();
      } else if (ev.key === "j" || ev.key === "k") {
        ev.preventDefault();
        move(ev.key === "j" ? 1 : -1);
      } else if (ev.key === "Enter" && current && !["A", "BUTTON"].includes(ev.target.tagName)) {
        ev.preventDefault();
        location.href = objectHref(current.context, resource, current.namespace, current.name);
      }
    });

    // ---------------------------------------------------------------- wiring
    $("controls").addEventListener("submit", (ev) => ev.preventDefault());
    resourceInput.addEventListener("change", () => {
      syncUrl();
      start();
    });
    namespaceInput.addEventListener("change", () => {
      syncUrl();
      start();
    });
    namespaceInput.addEventListener("focus", loadNamespaces);
    resourceInput.addEventListener("focus", () => {
      if (Date.now() - discoveredAt > 10000) discover(); // contexts come and go
    });
    filterInput.addEventListener("input", () => {
      syncUrl();
      refilter();
    });
    wideInput.addEventListener("change", () => {
      syncUrl();
      layout();
      flush();
    });

    // Ages and "… ago" move with the clock; nothing is fetched. Only what is drawn.
    setInterval(() => {
      for (const entry of rendered) {
        for (const td of entry.ages || []) text(td, age(td.dataset.time));
      }
      if (!$("contexts").classList.contains("compact")) {
        for (const card of contextsState.cards.values()) renderSync(card);
      }
    }, 1000);

    refilter();
    start();
    loadNamespaces();
  }

  // ------------------------------------------------------------------ logs
  // A pod's container log, read from the server as it comes (fetch, a stream of text):
  // the last lines, then, when following, each line as the container writes it. Put in as
  // text (a text node); terminal colour codes dropped, other control characters shown as
  // their symbols. The page keeps at most LOG_CHARS characters (the oldest lines go), and
  // draws what came once per animation frame, so a chatty or huge log never grows it.
  const LOG_CHARS = 1 << 20;
  const ANSI = /\x1b\[[0-?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;
  const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;

  function cleanLog(value) {
    return value
      .replace(ANSI, "")
      .replace(/\r\n/g, "\n")
      .replace(CONTROL, (c) => String.fromCharCode(c === "\x7f" ? 0x2421 : 0x2400 + c.charCodeAt(0)));
  }

  function logView(context, namespace, name) {
    const section = $("obj-logs");
    const box = $("log");
    const select = $("log-container");
    const state = $("log-state");
    let known = "";
    let controller = null;
    let pending = "";
    let frame = 0;
    let total = 0;
    let dropped = 0;
    const note = el("span", { className: "log-dropped" });

    function flush() {
      frame = 0;
      if (!pending) return;
      const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
      const chunk = cleanLog(pending);
      pending = "";
      box.append(document.createTextNode(chunk));
      total += chunk.length;
      // the oldest text goes, whole lines, until the page holds LOG_CHARS at most
      while (total > LOG_CHARS) {
        const first = note.isConnected ? note.nextSibling : box.firstChild;
        if (!first) break;
        const excess = total - LOG_CHARS;
        if (first.length <= excess) {
          total -= first.length;
          first.remove();
        } else {
          const cut = first.data.indexOf("\n", excess - 1) + 1 || first.length;
          total -= cut;
          first.deleteData(0, cut);
        }
        dropped += 1;
      }
      if (dropped) {
        text(note, "… older lines dropped (the page keeps the last " + (LOG_CHARS >> 10) + " KiB)\n");
        if (!note.isConnected) box.prepend(note);
      }
      if (atBottom) box.scrollTop = box.scrollHeight;
    }

    async function run(url, signal, follow) {
      text(state, "loading…");
      try {
        const answer = await fetch(url, { signal });
        if (!answer.ok) {
          let message = answer.status + " " + answer.statusText;
          try {
            message = (await answer.json()).error || message;
          } catch (err) {
            // not JSON: the status says it
          }
          box.replaceChildren(el("span", { className: "log-error" }, message));
          text(state, "");
          return;
        }
        text(state, follow ? "following" : "");
        const reader = answer.body.getReader();
        const decoder = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          pending += decoder.decode(value, { stream: true });
          if (!frame) frame = requestAnimationFrame(flush);
        }
        pending += decoder.decode();
        flush();
        if (!total) box.replaceChildren(el("span", { className: "log-dropped" }, "(no lines)"));
        text(state, follow ? "the log ended" : "");
      } catch (err) {
        if (err.name === "AbortError") return;
        text(state, "the log stream broke: " + err.message);
      }
    }

    function start() {
      if (controller) controller.abort();
      controller = new AbortController();
      if (frame) cancelAnimationFrame(frame);
      frame = 0;
      pending = "";
      total = 0;
      dropped = 0;
      note.remove();
      box.replaceChildren();
      const follow = $("log-follow").checked;
      const query = new URLSearchParams({ container: select.value, tailLines: $("log-tail").value });
      if (follow) query.set("follow", "1");
      if ($("log-previous").checked) query.set("previous", "1");
      const url = "api/contexts/" + encodeURIComponent(context) + "/pods/" +
        encodeURIComponent(namespace) + "/" + encodeURIComponent(name) + "/log?" + query.toString();
      run(url, controller.signal, follow);
    }

    for (const id of ["log-container", "log-tail", "log-follow", "log-previous"]) {
      $(id).addEventListener("change", start);
    }
    $("log-controls").addEventListener("submit", (ev) => ev.preventDefault());

    return {
      // the pod's containers (init ones first): the picker, and the log of the first
      // one that is not an init container, once
      containers(list) {
        const names = list.map((c) => c.name);
        const joined = names.join("\u0000");
        section.hidden = !names.length;
        if (!names.length || joined === known) return;
        const first = !known;
        known = joined;
        const chosen = select.value;
        select.replaceChildren(
          ...list.map((c) => el("option", { value: c.name }, c.init ? c.name + " (init)" : c.name)),
        );
        if (names.includes(chosen)) select.value = chosen;
        else {
          const main = list.find((c) => !c.init);
          select.value = main ? main.name : names[0];
        }
        if (first || select.value !== chosen) start();
      },
    };
  }

  // ------------------------------------------------------------------ one object
  // The server sends the object redacted, with its YAML, the objects it links to (owners, a
  // pod's node) and a pod's containers (views.object_payload); all of it goes in as text.
  function objectView() {
    $("object-view").hidden = false;
    const params = new URLSearchParams(location.search);
    const context = params.get("context") || "";
    const resource = params.get("resource") || "pods";
    const namespace = params.get("namespace") || "";
    const name = params.get("name") || "";
    const where = namespace ? namespace + "/" + name : name;
    text($("obj-title"), where);
    text($("crumb"), "/ " + context + " / " + resource);
    document.title = name + " · kubemux";
    $("back").setAttribute("href", "./?" + new URLSearchParams({ resource }).toString());

    // One term and its value, grouped in a <div> (allowed in a <dl>) so the columns keep them together.
    function summaryRow(term, value) {
      if (value === undefined || value === null || value === "") return [];
      return [el("div", null, el("dt", null, term), el("dd", null, value))];
    }

    // An owner or a node: a link to its own object page when the server knows its resource.
    function linkTo(link) {
      const label = link.kind + " " + link.name;
      if (!link.resource) return el("span", { className: "link-unknown", title: "no page for this kind" }, label);
      return el(
        "a",
        { className: "obj-link", href: objectHref(context, link.resource, link.namespace, link.name) },
        label,
      );
    }

    function linksRow(term, links) {
      if (!links.length) return [];
      const dd = el("dd", { className: "links" });
      links.forEach((link, i) => {
        if (i) dd.append(", ");
        dd.append(linkTo(link));
        if (link.controller) dd.append(el("span", { className: "muted" }, " (controller)"));
      });
      return [el("div", null, el("dt", null, term), dd)];
    }

    function containerRow(c) {
      const name = el("td", null, c.name);
      if (c.init) name.append(" ", el("span", { className: "badge badge-init" }, "init"));
      const state = el("td", { className: "col-state " + statusClass(c.reason) }, c.state);
      if (c.message) state.title = c.message;
      return el(
        "tr",
        { dataset: { container: c.name } },
        name,
        el("td", { className: "col-image" }, c.image),
        el("td", { className: c.ready ? "st-ok" : "st-warn" }, c.ready ? "yes" : "no"),
        el("td", { className: "num" }, c.restarts),
        state,
      );
    }

    const handlers = {
      object(data) {
        const gone = $("obj-gone");
        const obj = data.object;
        if (!obj) {
          gone.hidden = false;
          text(gone, data.gone || "This object does not exist (any more).");
          $("object-view").classList.add("is-gone");
          return;
        }
        gone.hidden = true;
        $("object-view").classList.remove("is-gone");
        const meta = obj.metadata || {};
        const status = obj.status || {};
        const links = data.links || [];
        const labels = el("span", { className: "chips" });
        for (const [k, v] of Object.entries(meta.labels || {})) {
          labels.append(el("span", { className: "chip" }, k + "=" + v));
        }
        // the status as the table shows it (a pod's phase may be Running while it crash-loops)
        const shown = data.status || status.phase || "";
        const state = el("span", { className: statusClass(shown) }, shown);
        if (status.phase && status.phase !== shown) {
          state.append(el("span", { className: "muted" }, " (phase " + status.phase + ")"));
        }
        const parts = [
          ...summaryRow("Kind", obj.kind),
          ...summaryRow("Context", context),
          ...summaryRow("Namespace", meta.namespace),
          ...summaryRow("Name", meta.name),
          ...(shown ? summaryRow("Status", state) : []),
          ...linksRow("Controlled by", links.filter((l) => l.rel === "owner")),
          ...linksRow("Node", links.filter((l) => l.rel === "node")),
          ...summaryRow("Pod IP", status.podIP),
          ...summaryRow("Created", meta.creationTimestamp && meta.creationTimestamp + " (" + age(meta.creationTimestamp) + " ago)"),
          ...summaryRow("Resource version", meta.resourceVersion),
        ];
        if (labels.childElementCount) parts.push(...summaryRow("Labels", labels));
        $("obj-summary").replaceChildren(...parts);
        const containers = data.containers || [];
        $("obj-containers").hidden = containers.length === 0;
        $("containers").tBodies[0].replaceChildren(...containers.map(containerRow));
        text($("obj-yaml"), data.yaml || "");
        logs.containers(containers);
      },
      events(events) {
        const tbody = $("events").tBodies[0];
        tbody.replaceChildren(
          ...events.map((e) =>
            el(
              "tr",
              { className: e.type === "Warning" ? "ev-warning" : "" },
              el("td", { title: e.time }, e.time ? age(e.time) + " ago" : ""),
              el("td", { className: e.type === "Warning" ? "st-bad" : "" }, e.type),
              el("td", null, e.reason),
              el("td", { className: "ev-message" }, e.message),
              el("td", { className: "num" }, e.count),
              el("td", null, e.source),
            ),
          ),
        );
        $("no-events").hidden = events.length > 0;
      },
      contexts(data) {
        applyPanel(panel, data);
        const c = panel.items.get(context);
        text($("obj-context"), c ? "context " + c.name + ": " + c.state + (c.last_error ? " — " + c.last_error : "") : "context " + context + " is not in the kubeconfig");
      },
    };
    const panel = panelModel();
    const logs = logView(context, namespace, name);
    const query = new URLSearchParams({ context, resource, namespace, name });
    connect("api/stream?" + query.toString(), handlers);
  }

  // ------------------------------------------------------------------ session (per-user mode)
  // A dashboard run with --user-tokens has a session: show who is logged in and a Log out
  // button; once the session is gone (logged out elsewhere, expired), go to the login page.
  const session = { on: false };

  async function checkSession() {
    let answer;
    try {
      answer = await fetch("api/session", { cache: "no-store" });
    } catch (e) {
      return;
    }
    if (answer.status === 401) {
      if (session.on) location.assign("login");
      return;
    }
    if (!answer.ok) return;
    const data = await answer.json();
    if (data.user === null) return; // a dashboard of one identity: no session
    session.on = true;
    text($("who"), data.user);
    $("who").title = Object.entries(data.contexts)
      .map(([ctx, user]) => ctx + ": " + user)
      .concat(Object.entries(data.refused).map(([ctx, why]) => ctx + ": " + why))
      .join("\n");
    $("session").hidden = false;
  }

  checkSession();
  if (location.pathname.endsWith("/object")) objectView();
  else tableView();
})();
