// ragen view: the step browser and the trajectory page (docs/VIEWER.md).
// The step's episode index is data/<stem>.js; their turns are in data/<stem>.c<K>.js,
// loaded when an episode is opened or searched. Filters, search and the open episode
// live in the URL's hash, so a reload or a shared link shows the same view.
(function () {
  "use strict";
  var R = window.RAGEN, el = R.el, fmt = R.fmt;
  var stem = document.body.getAttribute("data-stem");
  var app = document.getElementById("app");
  var PAGE_GROUPS = 12;
  var DEFAULTS = { env: "", outcome: "", rmin: "", rmax: "", fe: false, mm: false, kept: "", sort: "group", page: 0, q: "", "in": "all", noraw: false, ep: "", turn: "" };
  var state = {}, D = null, TILES = null, turns = {};

  function readState() {
    var h = R.readHash();
    state = {};
    Object.keys(DEFAULTS).forEach(function (k) {
      var v = h[k];
      if (v === undefined) state[k] = DEFAULTS[k];
      else if (typeof DEFAULTS[k] === "boolean") state[k] = v === "1" || v === "true";
      else if (typeof DEFAULTS[k] === "number") state[k] = parseInt(v, 10) || 0;
      else state[k] = v;
    });
  }
  function listState() {  // the browser's state, without the open episode
    var s = {};
    Object.keys(state).forEach(function (k) {
      if (k !== "ep" && k !== "turn" && state[k] !== DEFAULTS[k]) s[k] = state[k];
    });
    return s;
  }
  function changed() { state.page = state.page || 0; R.setHash(listState()); renderBrowser(); }

  // -- turns, loaded by chunk -----------------------------------------------------------
  function chunk(k) {
    return R.load(stem + ".c" + k).then(function (records) {
      records.forEach(function (rec, j) {
        var i = k * D.chunk + j;
        if (D.episodes[i]) turns[i] = R.compactTurns(rec, D.episodes[i]);
      });
    });
  }
  function allTurns() {
    var jobs = [];
    for (var k = 0; k < D.chunks; k++) jobs.push(chunk(k));
    return Promise.all(jobs);
  }

  // -- search and filters ---------------------------------------------------------------
  function hits(ep) {  // [turn, text] of the turns of ``ep`` that contain the query
    var out = [];
    (turns[ep.i] || []).forEach(function (t, k) {
      R.searchHits(t, state.q, state["in"], !state.noraw).forEach(function (pair) { out.push([k, pair[1]]); });
    });
    return out;
  }
  function passes(ep) {
    if (state.env && ep.env !== state.env) return false;
    if (state.outcome === "success" && !ep.ok) return false;
    if (state.outcome === "failure" && ep.ok) return false;
    if (state.rmin !== "" && ep.r < parseFloat(state.rmin)) return false;
    if (state.rmax !== "" && ep.r > parseFloat(state.rmax)) return false;
    if (state.fe && !ep.fe) return false;
    if (state.mm && !ep.mm) return false;
    if (state.kept === "kept" && ep.k !== true) return false;
    if (state.kept === "filtered" && ep.k !== false) return false;
    if (state.q && !hits(ep).length) return false;
    return true;
  }
  function mean(xs) { return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : 0; }
  function std(xs) {
    if (xs.length < 2) return 0;
    var m = mean(xs);
    return Math.sqrt(mean(xs.map(function (x) { return (x - m) * (x - m); })));
  }
  function groups() {
    var byId = {}, order = [];
    D.episodes.forEach(function (ep) {
      if (!(ep.g in byId)) { byId[ep.g] = { id: ep.g, all: [], shown: [] }; order.push(byId[ep.g]); }
      byId[ep.g].all.push(ep);
      if (passes(ep)) byId[ep.g].shown.push(ep);
    });
    order.forEach(function (g) {
      var rs = g.all.map(function (e) { return e.r; });
      g.std = std(rs); g.mean = mean(rs);
      g.shown.sort(function (a, b) { return b.r - a.r || a.e - b.e; });
    });
    var out = order.filter(function (g) { return g.shown.length; });
    var keys = {
      group: function (a, b) { return a.id < b.id ? -1 : a.id > b.id ? 1 : 0; },
      std: function (a, b) { return b.std - a.std || keys.group(a, b); },
      reward_desc: function (a, b) { return b.mean - a.mean || keys.group(a, b); },
      reward_asc: function (a, b) { return a.mean - b.mean || keys.group(a, b); }
    };
    out.sort(keys[state.sort] || keys.group);
    return out;
  }

  function control(label, input) { return el("label", { cls: "ctl" }, [label + " ", input]); }
  function select(name, options) {
    var s = el("select", { id: "f-" + name });
    options.forEach(function (o) {
      var opt = el("option", { value: o[0], text: o[1] });
      if (String(state[name]) === o[0]) opt.selected = true;
      s.appendChild(opt);
    });
    s.onchange = function () { state[name] = s.value; state.page = 0; changed(); };
    return s;
  }
  function number(name) {
    var i = el("input", { id: "f-" + name, type: "number", step: "any", value: state[name] });
    i.onchange = function () { state[name] = i.value; state.page = 0; changed(); };
    return i;
  }
  function check(name) {
    var i = el("input", { id: "f-" + name, type: "checkbox" });
    i.checked = state[name];
    i.onchange = function () { state[name] = i.checked; state.page = 0; changed(); };
    return i;
  }
  function searchBox() {
    var i = el("input", { id: "f-q", type: "search", placeholder: "search thoughts, answers, observations, raw replies", value: state.q, size: "34" });
    i.onchange = function () { state.q = i.value.trim(); state.page = 0; changed(); };
    return i;
  }
  function rawToggle() {  // on by default: the URL carries noraw=1 when it is off
    var i = el("input", { id: "f-raw", type: "checkbox" });
    i.checked = !state.noraw;
    i.onchange = function () { state.noraw = !i.checked; state.page = 0; changed(); };
    return i;
  }

  function card(ep) {
    var href = R.hash(Object.assign({}, listState(), { ep: ep.i }));
    var snippet = ep.sn;
    if (state.q) { var h = hits(ep); if (h.length) snippet = "turn " + (h[0][0] + 1) + ": " + R.around(h[0][1], state.q, 120); }
    var sn = el("div", { cls: "snippet" });
    sn.appendChild(R.marked(snippet, state.q));
    return el("a", { cls: "card " + (ep.ok ? "ok" : "fail") + (ep.k === false ? " filtered" : ""), href: href, "data-ep": String(ep.i) }, [
      el("div", { cls: "card-head" }, [
        el("b", { text: "episode " + ep.e }), " ",
        el("span", { cls: "badge " + (ep.ok ? "good" : "bad"), text: ep.ok ? "success" : "failure" })
      ]),
      el("div", { text: "reward " + fmt(ep.r) + " · " + ep.n + " turn" + (ep.n === 1 ? "" : "s") }),
      el("div", { cls: "small" }, [
        ep.k === true ? el("span", { cls: "badge good", text: "kept" }) : null,
        ep.k === false ? el("span", { cls: "badge muted", text: "filtered" }) : null,
        ep.fe ? el("span", { cls: "badge bad", text: ep.fe + " format err" }) : null,
        ep.mm ? el("span", { cls: "badge warn", text: ep.mm + " mismatch" }) : null
      ]),
      sn
    ]);
  }

  function renderBrowser() {
    document.title = D.title;
    if (state.q && Object.keys(turns).length < D.episodes.length) {
      app.innerHTML = "";
      app.appendChild(el("p", { cls: "small", id: "count", text: "searching " + D.episodes.length + " episodes…" }));
      allTurns().then(renderBrowser, function (e) { R.fail(app, e); });
      return;
    }
    app.innerHTML = "";
    var envs = {};
    D.episodes.forEach(function (e) { envs[e.env] = 1; });
    var envNames = Object.keys(envs);
    app.appendChild(el("div", { cls: "filters" }, [
      control("search", searchBox()),
      control("in", select("in", R.SEARCH_FIELDS)),
      el("label", { cls: "ctl" }, [rawToggle(), " raw replies too"]),
      envNames.length > 1 ? control("env", select("env", [["", "all"]].concat(envNames.map(function (n) { return [n, n]; })))) : null,
      control("outcome", select("outcome", [["", "all"], ["success", "success"], ["failure", "failure"]])),
      control("reward ≥", number("rmin")),
      control("≤", number("rmax")),
      control("format error", check("fe")),
      control("thought/answer mismatch", check("mm")),
      D.filtered ? control("StarPO-S", select("kept", [["", "all"], ["kept", "kept"], ["filtered", "filtered out"]])) : null,
      control("sort groups by", select("sort", [["group", "group id"], ["std", "in-group reward std"], ["reward_desc", "mean reward (high first)"], ["reward_asc", "mean reward (low first)"]]))
    ]));
    var gs = groups();
    var shown = gs.reduce(function (n, g) { return n + g.shown.length; }, 0);
    var pages = Math.max(1, Math.ceil(gs.length / PAGE_GROUPS));
    state.page = Math.min(state.page, pages - 1);
    app.appendChild(el("p", { cls: "small", id: "count", text: shown + " of " + D.episodes.length + " episodes in " + gs.length + " groups (initial states)" + (state.q ? " contain “" + state.q + "”" : "") }));
    gs.slice(state.page * PAGE_GROUPS, (state.page + 1) * PAGE_GROUPS).forEach(function (g) {
      app.appendChild(el("section", { cls: "group" }, [
        el("h3", { text: "group " + g.id + " · seed " + g.all[0].s + " · mean reward " + fmt(g.mean) + " · in-group std " + fmt(g.std) }),
        el("div", { cls: "cards" }, g.shown.map(card))
      ]));
    });
    if (pages > 1) {
      var nav = el("div", { cls: "pager" });
      for (var p = 0; p < pages; p++) {
        (function (p) {
          var b = el("button", { cls: p === state.page ? "current" : "", text: String(p + 1) });
          b.onclick = function () { state.page = p; changed(); window.scrollTo(0, 0); };
          nav.appendChild(b);
        })(p);
      }
      app.appendChild(nav);
    }
  }

  // -- trajectory page ------------------------------------------------------------------
  function kv(rows) {
    return el("table", { cls: "kv" }, rows.filter(function (r) { return r; }).map(function (r) {
      return el("tr", {}, [el("th", { text: r[0] }), el("td", { cls: r[2] || "" }, [r[1] instanceof Node ? r[1] : String(r[1])])]);
    }));
  }
  function actionList(t) {
    if (!t.x.length && !t.a.length) return "none";
    var ul = el("ul", { cls: "actions" });
    t.a.forEach(function (a, j) {
      var executed = j < t.x.length;
      var valid = executed ? t.v[j] : null, eff = executed ? t.ef[j] : null;
      ul.appendChild(el("li", {}, [
        el("code", { text: a }), " ",
        !executed ? el("span", { cls: "badge muted", text: "not executed" }) :
          el("span", { cls: "badge " + (valid ? "good" : "bad"), text: valid ? "valid" : "invalid" }),
        " ",
        executed && valid ? el("span", { cls: "badge " + (eff ? "good" : "muted"), text: eff ? "changed the state" : "no effect" }) : null
      ]));
    });
    return ul;
  }
  function factChip(f) {
    var cls = f[1] === true ? "ok" : f[1] === false ? "bad" : "unreadable";
    var title = f[1] === true ? "true" : f[1] === false ? "false" : "unreadable: not 'kind (row,col)'";
    return el("span", { cls: "fact " + cls, title: title, text: f[0] });
  }
  function chips(list, cls, title) {
    return el("span", {}, list.map(function (f) { return el("span", { cls: "fact " + cls, title: title, text: f }); }));
  }
  function grounding(gf) {  // the stated facts of the current state, each checked
    return el("div", { cls: "facts grounding" }, [
      el("div", {}, [el("span", { cls: "small", text: "stated: " })].concat(gf.stated.map(factChip))),
      gf.missed.length ? el("div", {}, [el("span", { cls: "small", text: "left out: " }), chips(gf.missed, "missed", "true, not stated")]) : null,
      el("div", { cls: "small truth", text: "true state: " + (gf.truth || "(nothing)") })
    ]);
  }
  function prediction(pf) {  // the prediction beside what happened
    var stated = {};
    pf.stated.forEach(function (f) { if (f[1] !== null) stated[f[0]] = 1; });
    var actual = [];
    (pf.truth ? pf.truth.split(";") : []).forEach(function (s) {
      s = s.trim(); if (s) actual.push(s);
    });
    var wrong = pf.stated.some(function (f) { return f[1] !== true; }) || pf.missed.length > 0;
    var table = el("table", { cls: "pred-vs-actual" + (wrong ? " mismatch" : " match") }, [
      el("tr", {}, [el("th", { text: "predicted" }), el("th", { text: "what happened" })]),
      el("tr", {}, [
        el("td", { cls: "predicted" }, pf.stated.length ? pf.stated.map(factChip) : ["(nothing)"]),
        el("td", { cls: "actual" }, actual.length ? actual.map(function (f) {
          return el("span", { cls: "fact " + (stated[f] ? "ok" : "missed"), title: stated[f] ? "predicted" : "not predicted", text: f });
        }) : ["(nothing)"])
      ])
    ]);
    return el("div", { cls: "facts world-model" }, [
      table,
      el("p", { cls: "small " + (wrong ? "bad" : "good"), text: wrong ? "the prediction differs from what happened" : "the prediction is what happened" }),
      pf.intended !== undefined && pf.intended !== pf.truth ? el("p", { cls: "small warn intended", text: "intended outcome (what the world_model reward scores): " + (pf.intended || "(nothing)") + "; the env did otherwise (e.g. it slipped)" }) : null
    ]);
  }
  function reply(t) {  // the thought, as its sections under a structured format
    var q = state.q && (state["in"] === "all" || state["in"] === "th") ? state.q : "";
    var parts = [el("h4", { text: "thought" })];
    if (t.sec) {
      ["observation", "reasoning", "prediction"].forEach(function (s) {
        if (!(s in t.sec)) return;
        parts.push(el("div", { cls: "section section-" + s }, [el("span", { cls: "section-name", text: s === "observation" ? "observation (grounding)" : s }), R.pre("sec-text", t.sec[s], q)]));
        if (s === "observation" && t.gf) parts.push(grounding(t.gf));
        if (s === "prediction" && t.pf) parts.push(prediction(t.pf));
      });
      var whole = el("details", {}, [el("summary", { text: "whole thought" }), R.pre("thought", t.th, q)]);
      parts.push(whole);
    } else {
      parts.push(R.pre("thought", t.th, q));
    }
    var qa = state.q && (state["in"] === "all" || state["in"] === "a") ? state.q : "";
    parts.push(el("h4", { text: "answer" }), R.pre("answer", t.a.join(" || "), qa));
    if (!t.f) parts.push(el("p", { cls: "bad format-error", text: "format error: " + (t.fx || "malformed reply") }));
    if (t.mm) parts.push(el("p", { cls: "warn", text: "the thought commits to other actions than the answer" }));
    var qr = state.q && R.searchesRaw(state["in"], !state.noraw) ? state.q : "";
    var raw = el("details", { cls: "raw" }, [el("summary", { text: "raw response" }), R.pre("response", t.rs, qr)]);
    // a malformed reply: the raw text is what there is to read; a search that found the
    // text in the raw reply alone: shown where it is
    var rawHit = qr && R.searchHits(t, qr, state["in"], true).some(function (h) { return h[0] === "raw reply"; });
    if (!t.f || rawHit) raw.open = true;
    parts.push(raw);
    return el("div", { cls: "reply" }, parts);
  }
  function seen(t) {  // the pictures the model received with this observation
    if (!t.im || !t.im.length) return null;
    return el("div", { cls: "seen" }, [el("div", { cls: "small", text: "what the model saw" })].concat(t.im.map(function (src) {
      return el("img", { cls: "seen-image", src: src, alt: "the observation's picture" });
    })));
  }
  function renderTrajectory(i) {
    var ep = D.episodes[i];
    app.innerHTML = "";
    if (!ep) { app.appendChild(el("p", { text: "no episode " + i + " in this step" })); return; }
    if (!turns[i]) {
      app.appendChild(el("p", { cls: "small", text: "loading episode " + ep.e + "…" }));
      chunk(ep.ch).then(function () { renderTrajectory(i); }, function (e) { R.fail(app, e); });
      return;
    }
    document.title = D.title + " · episode " + ep.e;
    app.appendChild(el("p", {}, [el("a", { href: R.hash(listState()) || "#", id: "back", text: "← all trajectories of " + D.label })]));
    app.appendChild(el("h2", { id: "traj-title", text: "episode " + ep.e + " (group " + ep.g + ", seed " + ep.s + ")" }));
    app.appendChild(kv([
      ["environment", ep.env],
      ["outcome", ep.ok ? "success" : "failure", ep.ok ? "good" : "bad"],
      ["episode reward", fmt(ep.r), "ep-reward"],
      ["turns", ep.n],
      ["ended by", ep.end],
      ep.k === null ? null : ["StarPO-S filter", ep.k ? "kept (trained on)" : "filtered out (not trained on)"],
      ep.src ? ["policy", ep.src] : null
    ]));
    var qo = state.q && (state["in"] === "all" || state["in"] === "o") ? state.q : "";
    turns[i].forEach(function (t, k) {
      var reward = [["reward", fmt(t.rw), "turn-reward"], ["env reward", fmt(t.er), "env-reward"]];
      var shaping = t.rw - t.er - (t.rr || 0);
      if (Math.abs(shaping) > 1e-9) reward.push(["format shaping", fmt(shaping), "shaping"]);
      if (t.rr) reward.push(["reasoning reward", fmt(t.rr), "reasoning-reward"]);
      if (t.sc) Object.keys(t.sc).forEach(function (n) { reward.push(["reasoning score: " + n, fmt(t.sc[n]), "score-" + n]); });
      if (t.adv !== null && t.adv !== undefined) reward.push(["advantage (mean over the turn's tokens)", fmt(t.adv, 4), "advantage"]);
      var prompt = t.p;
      app.appendChild(el("section", { cls: "turn" + (state.turn === String(k) ? " target" : ""), id: "turn-" + k }, [
        el("h3", { text: "turn " + (k + 1) + (t.d ? " (last)" : "") }),
        el("div", { cls: "turn-grid" }, [
          el("div", { cls: "obs" }, [
            el("h4", { text: "observation" }),
            seen(t),
            t.im && t.im.length ? null : R.picture(t.o, TILES),
            R.pre("observation", t.o, qo),
            prompt ? el("details", {}, [el("summary", { text: "full prompt" }), el("pre", { text: prompt })]) : null
          ]),
          reply(t),
          el("div", { cls: "effect" }, [el("h4", { text: "actions" }), actionList(t), kv(reward)])
        ])
      ]));
    });
    if (state.turn !== "") {
      var target = document.getElementById("turn-" + state.turn);
      if (target) target.scrollIntoView();
    }
  }

  function render() {
    readState();
    if (state.ep !== "") renderTrajectory(parseInt(state.ep, 10)); else renderBrowser();
  }
  window.addEventListener("hashchange", function () { render(); if (state.turn === "") window.scrollTo(0, 0); });
  Promise.all([R.load(stem), R.tiles()]).then(function (got) {
    D = got[0]; TILES = got[1];
    render();
    document.body.setAttribute("data-ready", "1");
  }, function (e) { R.fail(app, e); });
})();
