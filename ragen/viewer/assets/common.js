// ragen view: what every page shares (no libraries; works from file://).
// window.RAGEN: the data loader, the URL state, DOM helpers, pictures, a word diff.
(function () {
  "use strict";
  var R = window.RAGEN = window.RAGEN || {};
  var pending = {}, cache = {};

  // -- data files: data/<name>.js calls RAGEN_DATA(name, payload[, lines]); the payload
  // is the JSON itself, or a string: the JSON deflated and base64-encoded; with ``lines``
  // it is JSON lines (one record each, as the trajectories file holds them)
  function decode(payload, lines) {
    if (typeof payload !== "string") return Promise.resolve(payload);
    var bin = atob(payload), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).text().then(function (text) {
      if (!lines) return JSON.parse(text);
      return text.split("\n").filter(function (l) { return l.trim(); }).map(JSON.parse);
    });
  }
  window.RAGEN_DATA = function (name, payload, lines) {
    var p = pending[name];
    delete pending[name];
    if (p) decode(payload, lines).then(p.resolve, p.reject);
    else cache[name] = decode(payload, lines);
  };
  // a promise of data/<name>.js's payload (each file is loaded once, when first asked for)
  R.load = function (name) {
    if (!cache[name]) {
      cache[name] = new Promise(function (resolve, reject) {
        pending[name] = { resolve: resolve, reject: reject };
        var s = document.createElement("script");
        s.src = "data/" + name + ".js";
        s.onerror = function () { reject(new Error("could not load data/" + name + ".js")); };
        s.onload = function () { s.remove(); };  // its payload lives on in the cache only
        document.head.appendChild(s);
      });
    }
    return cache[name];
  };
  // drop a loaded payload (a search walks every file of a run: keep memory flat)
  R.forget = function (name) { delete cache[name]; };
  R.tiles = function () {
    return document.body.getAttribute("data-tiles") === "1" ? R.load("tiles").catch(function () { return null; }) : Promise.resolve(null);
  };

  // -- the view lives in the URL's hash (#q=box&outcome=failure&ep=3): a reload or a
  // shared link shows the same view
  R.readHash = function () {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      var k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
      out[k] = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1).replace(/\+/g, " "));
    });
    return out;
  };
  R.hash = function (obj) {
    var parts = [];
    Object.keys(obj).forEach(function (k) {
      var v = obj[k];
      if (v === "" || v === null || v === undefined || v === false) return;
      parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v === true ? "1" : String(v)));
    });
    return parts.length ? "#" + parts.join("&") : "";
  };
  // replace the hash without a history entry and without a hashchange event
  R.setHash = function (obj) {
    history.replaceState(null, "", location.pathname + location.search + (R.hash(obj) || "#"));
  };

  // -- DOM ------------------------------------------------------------------------------
  R.el = function (tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (attrs[k] === null || attrs[k] === undefined) continue;
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  };
  R.fmt = function (x, d) {
    if (x === null || x === undefined) return "—";
    if (typeof x !== "number") return String(x);
    return Number(x.toFixed(d === undefined ? 3 : d)).toString();
  };
  // ``text`` as nodes, with each (case-insensitive) occurrence of ``q`` in a <mark>
  R.marked = function (text, q) {
    var frag = document.createDocumentFragment();
    text = text || "";
    if (!q) { frag.appendChild(document.createTextNode(text)); return frag; }
    var low = text.toLowerCase(), ql = q.toLowerCase(), at = 0, i;
    while ((i = low.indexOf(ql, at)) >= 0) {
      frag.appendChild(document.createTextNode(text.slice(at, i)));
      frag.appendChild(R.el("mark", { text: text.slice(i, i + q.length) }));
      at = i + q.length;
    }
    frag.appendChild(document.createTextNode(text.slice(at)));
    return frag;
  };
  R.pre = function (cls, text, q) {
    var p = R.el("pre", { cls: cls });
    p.appendChild(R.marked(text, q));
    return p;
  };
  // a window of ``text`` around the first match of ``q``
  R.around = function (text, q, width) {
    var i = text.toLowerCase().indexOf(q.toLowerCase());
    if (i < 0) return text.slice(0, width);
    var start = Math.max(0, i - Math.floor(width / 3));
    return (start ? "…" : "") + text.slice(start, start + width);
  };

  // -- pictures -------------------------------------------------------------------------
  function gridLines(text) {  // the longest block of >= 2 equal-length lines
    var lines = text.split("\n"), best = [0, 0], start = 0;
    for (var i = 1; i <= lines.length; i++) {
      if (i === lines.length || lines[i].length !== lines[start].length || !lines[i]) {
        if (i - start > best[1] - best[0] && lines[start].length) best = [start, i];
        start = i;
      }
    }
    return best[1] - best[0] >= 2 ? lines.slice(best[0], best[1]) : null;
  }
  // a grid observation drawn from the env's own tiles (ragen.viewer.pictures), or null
  R.picture = function (obs, tiles) {
    if (!tiles || !obs) return null;
    var lines = gridLines(obs);
    if (!lines) return null;
    for (var r = 0; r < lines.length; r++)
      for (var c = 0; c < lines[r].length; c++) if (!(lines[r][c] in tiles.tiles)) return null;
    var s = tiles.size * 2;
    var grid = R.el("div", { cls: "picture", style: "grid-template-columns: repeat(" + lines[0].length + ", " + s + "px)" });
    lines.forEach(function (line) {
      Array.from(line).forEach(function (ch) {
        grid.appendChild(R.el("img", { src: tiles.tiles[ch], width: String(s), height: String(s), alt: ch }));
      });
    });
    return grid;
  };

  // -- a word diff (longest common subsequence): [[op, word]], op "=" | "-" | "+" --------
  R.diffWords = function (a, b) {
    var x = (a || "").split(/(\s+)/), y = (b || "").split(/(\s+)/);
    var n = x.length, m = y.length, L = [];
    for (var i = 0; i <= n; i++) { L.push(new Uint16Array(m + 1)); }
    for (i = n - 1; i >= 0; i--)
      for (var j = m - 1; j >= 0; j--)
        L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    var out = [];
    i = 0; j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push(["=", x[i]]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) { out.push(["-", x[i]]); i++; }
      else { out.push(["+", y[j]]); j++; }
    }
    while (i < n) out.push(["-", x[i++]]);
    while (j < m) out.push(["+", y[j++]]);
    return out;
  };
  R.diffNode = function (a, b) {
    var p = R.el("pre", { cls: "diff" });
    R.diffWords(a, b).forEach(function (d) {
      if (!d[1]) return;
      if (d[0] === "=") p.appendChild(document.createTextNode(d[1]));
      else p.appendChild(R.el(d[0] === "+" ? "ins" : "del", { text: d[1] }));
    });
    return p;
  };
  // -- a trajectory record's turn, read defensively (any field may be missing or odd)
  function str(x) { return typeof x === "string" ? x : x === null || x === undefined ? "" : String(x); }
  function strs(x) { return Array.isArray(x) ? x.map(str) : []; }
  function num(x) { return typeof x === "number" && isFinite(x) ? x : null; }
  R.str = str;
  // the short-keyed turn the pages show (``adv``: its advantage, ``mm``: the
  // thought/answer mismatch verdict, ``rx``: ragen.viewer.data.turn_extras or null)
  R.compactTurn = function (t, adv, mm, rx) {
    var info = t.info && typeof t.info === "object" ? t.info : {};
    var scores = info.reasoning_scores && typeof info.reasoning_scores === "object" ? info.reasoning_scores : null;
    var obs = str(t.observation), prompt = str(t.prompt);
    var out = {
      o: obs, p: prompt, rs: str(t.response), th: str(t.thought),
      a: strs(t.actions), x: strs(t.executed_actions),
      v: Array.isArray(info.action_is_valid) ? info.action_is_valid.map(Boolean) : [],
      ef: Array.isArray(info.action_is_effective) ? info.action_is_effective.map(Boolean) : [],
      er: num(t.env_reward), rw: num(t.reward), f: t.format_ok === undefined ? true : !!t.format_ok,
      fx: str(info.format_error), sc: scores, rr: num(info.reasoning_reward) || 0,
      adv: num(adv), d: !!t.done, mm: mm === null || mm === undefined ? null : !!mm,
      im: strs(info.images).filter(function (s) { return s.indexOf("data:image/") === 0; })
    };
    if (rx) { out.sec = rx.sec; out.gf = rx.gf; out.pf = rx.pf; }
    return out;
  };
  R.compactTurns = function (record, entry) {
    var adv = Array.isArray(record.advantages) ? record.advantages : [];
    var turns = Array.isArray(record.turns) ? record.turns : [];
    return turns.map(function (t, k) {
      return R.compactTurn(t && typeof t === "object" ? t : {}, adv[k], (entry.mv || [])[k], (entry.rx || [])[k] || null);
    });
  };

  // -- search: where a query is looked for (the step page's filter and search.html) ---
  R.SEARCH_FIELDS = [["all", "thoughts, answers, observations"], ["th", "thoughts"], ["a", "answers"], ["o", "observations"], ["r", "raw replies only"]];
  // [[field name, text]] of turn ``t`` holding ``q`` (case-insensitive) in ``field``
  // ("all", "th", "a", "o", "r"). With ``raw`` the raw reply is searched too, and
  // counted only where the parsed thought and answer do not hold the query: a malformed
  // reply has neither, and a well-formed one would count twice
  R.searchHits = function (t, q, field, raw) {
    var ql = (q || "").toLowerCase(), out = [];
    function has(text) { return !!ql && !!text && text.toLowerCase().indexOf(ql) >= 0; }
    if ((field === "all" || field === "th") && has(t.th)) out.push(["thought", t.th]);
    if ((field === "all" || field === "a") && has(t.a.join(" || "))) out.push(["answer", t.a.join(" || ")]);
    var replied = out.length > 0;
    if ((field === "all" || field === "o") && has(t.o)) out.push(["observation", t.o]);
    var rawToo = field === "r" || (raw && field !== "o" && !replied);
    if (rawToo && has(t.rs)) out.push(["raw reply", t.rs]);
    return out;
  };
  // whether a query is looked for in the raw reply (to mark it there, and open it)
  R.searchesRaw = function (field, raw) { return field === "r" || (raw && field !== "o"); };

  R.fail = function (app, err) {
    app.appendChild(R.el("p", { cls: "bad", id: "load-error", text: "could not show this page: " + err }));
  };
})();
