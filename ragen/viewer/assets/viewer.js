// ragen view: the step browser and the trajectory page (no libraries, works from file://).
// The step's data is window.RAGEN_STEP (data/<page>.js), tiles window.RAGEN_TILES.
(function () {
  "use strict";
  var D = window.RAGEN_STEP;
  var TILES = window.RAGEN_TILES || null;
  var app = document.getElementById("app");
  var PAGE_GROUPS = 12;
  var state = { env: "", outcome: "", rmin: "", rmax: "", fe: false, mm: false, kept: "", sort: "group", page: 0 };

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }
  function fmt(x, d) {
    if (x === null || x === undefined) return "—";
    if (typeof x !== "number") return String(x);
    return Number(x.toFixed(d === undefined ? 3 : d)).toString();
  }
  function mean(xs) { return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : 0; }
  function std(xs) {
    if (xs.length < 2) return 0;
    var m = mean(xs);
    return Math.sqrt(mean(xs.map(function (x) { return (x - m) * (x - m); })));
  }

  // -- filters ------------------------------------------------------------------------
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
    return true;
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
      group: function (a, b) { return a.id - b.id; },
      std: function (a, b) { return b.std - a.std || a.id - b.id; },
      reward_desc: function (a, b) { return b.mean - a.mean || a.id - b.id; },
      reward_asc: function (a, b) { return a.mean - b.mean || a.id - b.id; }
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
    s.onchange = function () { state[name] = s.value; state.page = 0; render(); };
    return s;
  }
  function number(name) {
    var i = el("input", { id: "f-" + name, type: "number", step: "any", value: state[name] });
    i.onchange = function () { state[name] = i.value; state.page = 0; render(); };
    return i;
  }
  function check(name) {
    var i = el("input", { id: "f-" + name, type: "checkbox" });
    i.checked = state[name];
    i.onchange = function () { state[name] = i.checked; state.page = 0; render(); };
    return i;
  }

  function card(ep) {
    var first = ep.t.length ? ep.t[0] : null;
    var a = el("a", { cls: "card " + (ep.ok ? "ok" : "fail") + (ep.k === false ? " filtered" : ""), href: "#ep=" + ep.i, "data-ep": String(ep.i) }, [
      el("div", { cls: "card-head" }, [
        el("b", { text: "episode " + ep.e }),
        " ",
        el("span", { cls: "badge " + (ep.ok ? "good" : "bad"), text: ep.ok ? "success" : "failure" })
      ]),
      el("div", { text: "reward " + fmt(ep.r) + " · " + ep.n + " turn" + (ep.n === 1 ? "" : "s") }),
      el("div", { cls: "small" }, [
        ep.k === true ? el("span", { cls: "badge good", text: "kept" }) : null,
        ep.k === false ? el("span", { cls: "badge muted", text: "filtered" }) : null,
        ep.fe ? el("span", { cls: "badge bad", text: ep.fe + " format err" }) : null,
        ep.mm ? el("span", { cls: "badge warn", text: ep.mm + " mismatch" }) : null
      ]),
      first ? el("div", { cls: "snippet", text: (first.th || first.rs || "").slice(0, 120) }) : null
    ]);
    return a;
  }

  function renderBrowser() {
    document.title = D.title;
    app.innerHTML = "";
    var envs = {};
    D.episodes.forEach(function (e) { envs[e.env] = 1; });
    var envNames = Object.keys(envs);
    var bar = el("div", { cls: "filters" }, [
      envNames.length > 1 ? control("env", select("env", [["", "all"]].concat(envNames.map(function (n) { return [n, n]; })))) : null,
      control("outcome", select("outcome", [["", "all"], ["success", "success"], ["failure", "failure"]])),
      control("reward ≥", number("rmin")),
      control("≤", number("rmax")),
      control("format error", check("fe")),
      control("thought/answer mismatch", check("mm")),
      D.filtered ? control("StarPO-S", select("kept", [["", "all"], ["kept", "kept"], ["filtered", "filtered out"]])) : null,
      control("sort groups by", select("sort", [["group", "group id"], ["std", "in-group reward std"], ["reward_desc", "mean reward (high first)"], ["reward_asc", "mean reward (low first)"]]))
    ]);
    app.appendChild(bar);
    var gs = groups();
    var shown = gs.reduce(function (n, g) { return n + g.shown.length; }, 0);
    var pages = Math.max(1, Math.ceil(gs.length / PAGE_GROUPS));
    state.page = Math.min(state.page, pages - 1);
    app.appendChild(el("p", { cls: "small", id: "count", text: shown + " of " + D.episodes.length + " episodes in " + gs.length + " groups (initial states)" }));
    gs.slice(state.page * PAGE_GROUPS, (state.page + 1) * PAGE_GROUPS).forEach(function (g) {
      var seed = g.all[0].s;
      app.appendChild(el("section", { cls: "group" }, [
        el("h3", { text: "group " + g.id + " · seed " + seed + " · mean reward " + fmt(g.mean) + " · in-group std " + fmt(g.std) }),
        el("div", { cls: "cards" }, g.shown.map(card))
      ]));
    });
    if (pages > 1) {
      var nav = el("div", { cls: "pager" });
      for (var p = 0; p < pages; p++) {
        (function (p) {
          var b = el("button", { cls: p === state.page ? "current" : "", text: String(p + 1) });
          b.onclick = function () { state.page = p; render(); window.scrollTo(0, 0); };
          nav.appendChild(b);
        })(p);
      }
      app.appendChild(nav);
    }
  }

  // -- trajectory page -----------------------------------------------------------------
  function picture(obs) {
    if (!TILES || !obs) return null;
    var lines = gridLines(obs);
    if (!lines) return null;
    for (var r = 0; r < lines.length; r++)
      for (var c = 0; c < lines[r].length; c++) if (!(lines[r][c] in TILES.tiles)) return null;
    var s = TILES.size * 2;
    var grid = el("div", { cls: "picture", style: "grid-template-columns: repeat(" + lines[0].length + ", " + s + "px)" });
    lines.forEach(function (line) {
      Array.from(line).forEach(function (ch) {
        grid.appendChild(el("img", { src: TILES.tiles[ch], width: String(s), height: String(s), alt: ch }));
      });
    });
    return grid;
  }
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
        el("code", { text: a }),
        " ",
        !executed ? el("span", { cls: "badge muted", text: "not executed" }) :
          el("span", { cls: "badge " + (valid ? "good" : "bad"), text: valid ? "valid" : "invalid" }),
        " ",
        executed && valid ? el("span", { cls: "badge " + (eff ? "good" : "muted"), text: eff ? "changed the state" : "no effect" }) : null
      ]));
    });
    return ul;
  }
  function renderTrajectory(i) {
    var ep = D.episodes[i];
    app.innerHTML = "";
    if (!ep) { app.appendChild(el("p", { text: "no episode " + i + " in this step" })); return; }
    document.title = D.title + " · episode " + ep.e;
    app.appendChild(el("p", {}, [el("a", { href: "#", id: "back", text: "← all trajectories of " + D.label })]));
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
    ep.t.forEach(function (t, k) {
      var reward = [["reward", fmt(t.rw), "turn-reward"], ["env reward", fmt(t.er), "env-reward"]];
      var shaping = t.rw - t.er - (t.rr || 0);
      if (Math.abs(shaping) > 1e-9) reward.push(["format shaping", fmt(shaping), "shaping"]);
      if (t.rr) reward.push(["reasoning reward", fmt(t.rr), "reasoning-reward"]);
      if (t.sc) Object.keys(t.sc).forEach(function (n) { reward.push(["reasoning score: " + n, fmt(t.sc[n])]); });
      if (t.adv !== null && t.adv !== undefined) reward.push(["advantage (mean over the turn's tokens)", fmt(t.adv, 4), "advantage"]);
      var prompt = t.p ? t.p.split("\u0000").join(t.o) : "";
      app.appendChild(el("section", { cls: "turn", id: "turn-" + k }, [
        el("h3", { text: "turn " + (k + 1) + (t.d ? " (last)" : "") }),
        el("div", { cls: "turn-grid" }, [
          el("div", { cls: "obs" }, [
            el("h4", { text: "observation" }),
            picture(t.o),
            el("pre", { cls: "observation", text: t.o }),
            prompt ? el("details", {}, [el("summary", { text: "full prompt" }), el("pre", { text: prompt })]) : null
          ]),
          el("div", { cls: "reply" }, [
            el("h4", { text: "thought" }),
            el("pre", { cls: "thought", text: t.th }),
            el("h4", { text: "answer" }),
            el("pre", { cls: "answer", text: t.a.join(" || ") }),
            t.f ? null : el("p", { cls: "bad format-error", text: "format error: " + (t.fx || "malformed reply") }),
            t.mm ? el("p", { cls: "warn", text: "the thought commits to other actions than the answer" }) : null,
            el("details", {}, [el("summary", { text: "raw response" }), el("pre", { cls: "response", text: t.rs })])
          ]),
          el("div", { cls: "effect" }, [
            el("h4", { text: "actions" }),
            actionList(t),
            kv(reward)
          ])
        ])
      ]));
    });
  }

  function render() {
    var m = /^#ep=(\d+)/.exec(location.hash);
    if (m) renderTrajectory(parseInt(m[1], 10)); else renderBrowser();
  }
  window.addEventListener("hashchange", function () { render(); window.scrollTo(0, 0); });
  render();
})();
