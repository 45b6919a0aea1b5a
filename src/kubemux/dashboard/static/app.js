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

  // A stable colour per context name (FNV-1a, spread by the golden ratio), so rows from
  // different contexts are easy to tell apart, also for names that differ in one letter.
  function hue(name) {
    let h = 0x811c9dc5;
    for (const byte of new TextEncoder().encode(name)) {
      h = Math.imul(h ^ byte, 16777619) >>> 0;
    }
    return Math.floor(((h * 0.618033988749895) % 1) * 360);
  }

  function dot(name) {
    const d = el("span", { className: "dot", "aria-hidden": "true" });
    d.style.setProperty("--hue", String(hue(name)));
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
        setBanner("stream", data.message, data.fatal ? "error" : "warn");
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
  const contextsState = { previous: null, cards: new Map() };

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

  function noteContextChanges(payload) {
    const before = contextsState.previous;
    const now = new Map(payload.contexts.map((c) => [c.name, c]));
    if (before) {
      for (const [name, c] of now) {
        const old = before.get(name);
        if (!old) {
          logActivity("context " + name + " added", "add");
        } else if (old.generation && c.generation && old.generation !== c.generation) {
          logActivity("context " + name + " reloaded (generation " + c.generation + ")", "reload");
        } else if (old.state !== c.state && ["backing off", "error"].includes(c.state)) {
          logActivity("context " + name + ": " + c.state, "error");
        }
      }
      for (const name of before.keys()) {
        if (!now.has(name)) logActivity("context " + name + " removed", "remove");
      }
    } else {
      const n = payload.contexts.length;
      logActivity("watching " + n + (n === 1 ? " context" : " contexts"), "info");
    }
    contextsState.previous = now;
  }

  function contextCard(c, resource) {
    const card = el("article", { className: "card", dataset: { context: c.name } });
    const head = el("div", { className: "card-head" });
    const name = el("span", { className: "ctx-name" });
    const current = el("span", { className: "badge badge-current" }, "current");
    const state = el("span", { className: "badge state" });
    head.append(dot(c.name), name, current, state);
    const where = el("div", { className: "card-where muted" });
    const counts = el("div", { className: "card-counts" });
    const error = el("div", { className: "card-error" });
    card.append(head, where, counts, error);
    card._parts = { name, current, state, where, counts, error };
    return card;
  }

  function fillCard(card, c, resource) {
    const p = card._parts;
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
    p.counts.dataset.lastSync = c.last_sync ? String(c.last_sync) : "";
    p.counts.dataset.text = parts.join(" · ") || "no watchers yet";
    renderCounts(p.counts);
    let err = c.last_error || "";
    if (err && c.retry_in) err += " (retry in " + Math.ceil(c.retry_in) + "s)";
    text(p.error, err);
    p.error.hidden = !err;
    card.classList.toggle("card-bad", Boolean(err));
  }

  function renderCounts(node) {
    const last = Number(node.dataset.lastSync);
    const synced = last ? " · synced " + duration(Date.now() / 1000 - last) + " ago" : "";
    text(node, node.dataset.text + synced);
  }

  function renderContexts(payload, resource) {
    noteContextChanges(payload);
    const box = $("contexts");
    const seen = new Set();
    const order = [];
    for (const c of payload.contexts) {
      seen.add(c.name);
      let card = contextsState.cards.get(c.name);
      if (!card) {
        card = contextCard(c, resource);
        contextsState.cards.set(c.name, card);
      }
      fillCard(card, c, resource);
      order.push(card);
    }
    for (const [name, card] of contextsState.cards) {
      if (!seen.has(name)) {
        card.remove();
        contextsState.cards.delete(name);
      }
    }
    order.forEach((card, i) => {
      if (box.children[i] !== card) box.insertBefore(card, box.children[i] || null);
    });
    if (!payload.contexts.length) {
      if (!box.querySelector(".empty")) box.append(el("p", { className: "empty" }, "No contexts in the kubeconfig."));
    } else {
      const empty = box.querySelector(".empty");
      if (empty) empty.remove();
    }
    text($("syncs"), payload.kubeconfig_syncs ? "kubeconfig synced " + payload.kubeconfig_syncs + "×" : "");
    setBanners(
      "kubeconfig:",
      Object.entries(payload.kubeconfig_errors).map(([file, e]) => [file, "kubeconfig " + file + ": " + e]),
    );
    setBanners(
      "invalid:",
      Object.entries(payload.invalid_contexts).map(([name, why]) => [name, "context " + name + " cannot be used: " + why]),
    );
  }

  // ------------------------------------------------------------------ the table
  function tableView() {
    $("table-view").hidden = false;
    const params = new URLSearchParams(location.search);
    const resourceInput = $("resource");
    const namespaceInput = $("namespace");
    const filterInput = $("filter");
    resourceInput.value = params.get("resource") || "pods";
    namespaceInput.value = params.get("namespace") || "";
    filterInput.value = params.get("q") || "";

    const tbody = $("rows").tBodies[0];
    const rows = new Map(); // key -> {tr, context, namespace, name, stale}
    let order = []; // sorted keys
    const namespaces = new Set();
    let resource = resourceInput.value.trim();
    let stream = null;
    let terms = [];

    const keyOf = (c) => c.context + "\u0000" + c.namespace + "\u0000" + c.name;

    function position(key) {
      let lo = 0;
      let hi = order.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (order[mid] < key) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    }

    function makeRow(c) {
      const tr = el("tr", { dataset: { context: c.context } });
      const cells = {};
      for (const col of ["context", "namespace", "name", "status", "ready", "restarts", "node", "age"]) {
        const td = el("td", { className: "col-" + col });
        cells[col] = td;
        tr.append(td);
      }
      cells.context.append(dot(c.context), el("span", null, c.context));
      const link = el("a", { href: objectHref(c.context, resource, c.namespace, c.name) }, c.name);
      cells.name.append(link);
      text(cells.namespace, c.namespace);
      cells.ready.classList.add("num");
      cells.restarts.classList.add("num");
      cells.age.classList.add("num");
      tr._cells = cells;
      return tr;
    }

    function fillRow(tr, c) {
      const r = c.row;
      const cells = tr._cells;
      text(cells.status, r.status);
      cells.status.className = "col-status " + statusClass(r.status);
      text(cells.ready, r.ready);
      text(cells.restarts, r.restarts === null || r.restarts === undefined ? "" : r.restarts);
      text(cells.node, r.node);
      tr.dataset.created = r.created || "";
      text(cells.age, age(r.created));
      const labels = Object.entries(r.labels || {}).map(([k, v]) => k + "=" + v);
      tr.title = labels.join("\n");
      tr.dataset.search = [c.context, c.namespace, c.name, r.status, r.node, ...labels]
        .join(" ")
        .toLowerCase();
      applyFilter(tr);
    }

    function applyFilter(tr) {
      const hay = tr.dataset.search || "";
      tr.hidden = !terms.every((t) => hay.includes(t));
    }

    function flash(tr) {
      tr.classList.remove("flash");
      void tr.offsetWidth; // restart the animation
      tr.classList.add("flash");
    }

    function upsert(c) {
      const key = keyOf(c);
      let entry = rows.get(key);
      if (entry) {
        entry.stale = false;
      } else {
        const tr = makeRow(c);
        entry = { tr, context: c.context, stale: false };
        rows.set(key, entry);
        const i = position(key);
        order.splice(i, 0, key);
        const next = order[i + 1];
        tbody.insertBefore(tr, next ? rows.get(next).tr : null);
        if (c.namespace && !namespaces.has(c.namespace)) {
          namespaces.add(c.namespace);
          const list = $("namespaces");
          list.replaceChildren(...[...namespaces].sort().map((ns) => el("option", { value: ns })));
        }
      }
      fillRow(entry.tr, c);
      flash(entry.tr);
    }

    function removeKey(key) {
      const entry = rows.get(key);
      if (!entry) return;
      entry.tr.remove();
      rows.delete(key);
      order.splice(position(key), 1);
    }

    function removeContext(context) {
      for (const [key, entry] of [...rows]) if (entry.context === context) removeKey(key);
    }

    function updateCount() {
      let shown = 0;
      for (const entry of rows.values()) if (!entry.tr.hidden) shown += 1;
      const total = rows.size;
      text($("count"), shown === total ? total + " " + resource : shown + " of " + total + " " + resource);
      const empty = $("empty");
      empty.hidden = shown > 0;
      if (!total) text(empty, synced ? "No " + resource + "." : "Waiting for objects…");
      else text(empty, "No " + resource + " match the filter.");
    }

    let synced = false;
    const handlers = {
      reset(data) {
        synced = false;
        for (const entry of rows.values()) entry.stale = true;
        if (data.title) {
          text($("title"), data.title);
          document.title = data.title;
        }
        updateCount();
      },
      synced() {
        for (const [key, entry] of [...rows]) if (entry.stale) removeKey(key);
        synced = true;
        updateCount();
      },
      changes(batch) {
        for (const c of batch) {
          if (c.type === "ADDED" || c.type === "MODIFIED") upsert(c);
          else if (c.type === "DELETED") removeKey(keyOf(c));
          else if (c.type === "RESET" || c.type === "REMOVED") removeContext(c.context);
        }
        updateCount();
      },
      contexts(payload) {
        renderContexts(payload, resource);
      },
    };

    function start() {
      if (stream) stream.stop();
      setBanner("stream", null);
      rows.clear();
      order = [];
      tbody.replaceChildren();
      synced = false;
      resource = resourceInput.value.trim() || "pods";
      const query = new URLSearchParams({ resource });
      const ns = namespaceInput.value.trim();
      if (ns) query.set("namespace", ns);
      stream = connect("api/stream?" + query.toString(), handlers);
      updateCount();
      checkResource(resource);
    }

    // The cluster's own resource list (discovery) for the picker; a name it does not serve
    // gets the server's answer (with suggestions) as a banner, never a silent empty table.
    let served = null; // Set of names, short names and kinds the first context serves
    let checkedContext = null;
    async function discover() {
      try {
        const status = await (await fetch("api/contexts")).json();
        const names = status.contexts.map((c) => c.name);
        checkedContext = status.current_context && names.includes(status.current_context)
          ? status.current_context : names[0];
        if (!checkedContext) return;
        const answer = await fetch("api/contexts/" + encodeURIComponent(checkedContext) + "/resources");
        if (!answer.ok) return;
        const list = (await answer.json()).resources;
        served = new Set();
        for (const r of list) {
          served.add(r.name);
          served.add(r.name.split(".")[0]);
          served.add(r.kind.toLowerCase());
          for (const short of r.short_names) served.add(short);
        }
        $("resources").replaceChildren(...list.map((r) => el("option", { value: r.name })));
      } catch (err) {
        served = null; // the static list stays
      }
    }

    async function checkResource(name) {
      setBanner("resource", null);
      if (!served) await discover();
      if (!served || !checkedContext || served.has(name.toLowerCase())) return;
      try {
        const path = "api/contexts/" + encodeURIComponent(checkedContext) + "/" +
          encodeURIComponent(name) + "/table";
        const answer = await fetch(path);
        if (answer.status === 404 && name === resource) {
          setBanner("resource", (await answer.json()).error, "error");
        }
      } catch (err) {
        // the stream reports what it can
      }
    }

    function syncUrl() {
      const query = new URLSearchParams();
      const res = resourceInput.value.trim();
      if (res && res !== "pods") query.set("resource", res);
      if (namespaceInput.value.trim()) query.set("namespace", namespaceInput.value.trim());
      if (filterInput.value.trim()) query.set("q", filterInput.value.trim());
      const qs = query.toString();
      history.replaceState(null, "", qs ? "?" + qs : location.pathname);
    }

    function refilter() {
      terms = filterInput.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const entry of rows.values()) applyFilter(entry.tr);
      updateCount();
    }

    $("controls").addEventListener("submit", (ev) => ev.preventDefault());
    resourceInput.addEventListener("change", () => {
      syncUrl();
      start();
    });
    namespaceInput.addEventListener("change", () => {
      syncUrl();
      start();
    });
    filterInput.addEventListener("input", () => {
      syncUrl();
      refilter();
    });

    // Ages and "synced … ago" move with the clock; nothing is fetched.
    setInterval(() => {
      for (const entry of rows.values()) {
        const tr = entry.tr;
        if (!tr.hidden) text(tr._cells.age, age(tr.dataset.created));
      }
      for (const card of contextsState.cards.values()) renderCounts(card._parts.counts);
    }, 1000);

    refilter();
    start();
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
      contexts(payload) {
        const c = payload.contexts.find((x) => x.name === context);
        text($("obj-context"), c ? "context " + c.name + ": " + c.state + (c.last_error ? " — " + c.last_error : "") : "context " + context + " is not in the kubeconfig");
      },
    };
    const query = new URLSearchParams({ context, resource, namespace, name });
    connect("api/stream?" + query.toString(), handlers);
  }

  if (location.pathname.endsWith("/object")) objectView();
  else tableView();
})();
