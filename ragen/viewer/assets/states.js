// ragen view: each validation state across training (states.html).
// A matrix of states x validation steps (solved or not); a state's page shows, at every
// validation step, its outcome, thoughts and actions, and a word diff of the reasoning
// between two chosen steps. The view is in the URL (#seed=12&a=10&b=100).
(function () {
  "use strict";
  var R = window.RAGEN, el = R.el, fmt = R.fmt;
  var app = document.getElementById("app");
  var D = null, TILES = null;

  function cellText(step, c) {
    return "step " + step + ": " + (c ? (c.ok ? "solved" : "not solved") + ", reward " + fmt(c.r) + ", " + c.n + " turns" : "not played");
  }
  function matrix() {
    var head = el("tr", {}, [el("th", { text: "state (seed)" })].concat(D.steps.map(function (s) { return el("th", { cls: "step-col", text: String(s) }); })).concat([el("th", { text: "solved" })]));
    var rows = D.states.map(function (st) {
      var solved = 0, played = 0;
      var cells = D.steps.map(function (s) {
        var c = st.cells[String(s)];
        if (c) { played++; solved += c.ok ? 1 : 0; }
        return el("td", { cls: "cell " + (c ? (c.ok ? "ok" : "fail") : "none"), title: cellText(s, c), "data-step": String(s) });
      });
      var link = el("a", { href: R.hash({ seed: st.seed }), cls: "state-link", text: String(st.seed) });
      return el("tr", { "data-seed": String(st.seed) }, [el("td", {}, [link])].concat(cells).concat([el("td", { text: solved + "/" + played })]));
    });
    app.appendChild(el("table", { id: "states", cls: "matrix" }, [head].concat(rows)));
  }

  function actions(c) { return c.t.map(function (t) { return t.a.join(" || ") || (t.f ? "(none)" : "(format error)"); }).join("  ·  "); }
  function thoughts(c) { return c.t.map(function (t, k) { return (c.t.length > 1 ? "turn " + (k + 1) + ": " : "") + t.th; }).join("\n"); }

  function stateView(h) {
    var st = D.states.filter(function (s) { return String(s.seed) === h.seed; })[0];
    if (!st) { app.appendChild(el("p", { text: "no validation state with seed " + h.seed })); return; }
    var steps = D.steps.filter(function (s) { return st.cells[String(s)]; });
    app.appendChild(el("p", {}, [el("a", { href: "#", id: "back", text: "← all validation states" })]));
    app.appendChild(el("h2", { id: "state-title", text: "validation state seed " + st.seed }));
    var first = st.cells[String(steps[0])];
    if (first && first.t.length) {
      var t0 = first.t[0], seen = t0.im && t0.im.length ? el("img", { cls: "seen-image", src: t0.im[0], alt: "the picture the model saw" }) : null;
      app.appendChild(el("div", { cls: "initial seen" }, [el("h4", { text: "initial observation" }), seen || R.picture(t0.o, TILES), el("pre", { cls: "observation", text: t0.o })]));
    }
    var rows = steps.map(function (s) {
      var c = st.cells[String(s)];
      return el("tr", { "data-step": String(s) }, [
        el("td", {}, [el("a", { href: D.pages[String(s)] + R.hash({ ep: c.i }), text: String(s) })]),
        el("td", { cls: c.ok ? "good" : "bad", text: c.ok ? "solved" : "not solved" }),
        el("td", { text: fmt(c.r) }),
        el("td", { text: String(c.n) }),
        el("td", {}, [el("pre", { cls: "thought", text: thoughts(c) })]),
        el("td", { cls: "acts", text: actions(c) })
      ]);
    });
    app.appendChild(el("table", { id: "state-steps" }, [el("tr", {}, ["step", "outcome", "reward", "turns", "thought", "actions"].map(function (t) { return el("th", { text: t }); }))].concat(rows)));
    // the reasoning diff between two chosen steps
    var a = h.a && st.cells[h.a] ? h.a : String(steps[0]), b = h.b && st.cells[h.b] ? h.b : String(steps[steps.length - 1]);
    function picker(id, value, other) {
      var s = el("select", { id: id }, steps.map(function (x) {
        var o = el("option", { value: String(x), text: "step " + x });
        if (String(x) === value) o.selected = true;
        return o;
      }));
      s.onchange = function () { var n = { seed: st.seed, a: a, b: b }; n[other] = s.value; location.hash = R.hash(n); };
      return s;
    }
    var section = el("div", { id: "diff-section" }, [
      el("h3", { text: "How the reasoning changed" }),
      el("p", { cls: "filters" }, ["from ", picker("diff-a", a, "a"), " to ", picker("diff-b", b, "b"), el("span", { cls: "small", text: " (struck out: only in the first; underlined: only in the second)" })])
    ]);
    app.appendChild(section);
    var ca = st.cells[a], cb = st.cells[b], n = Math.max(ca.t.length, cb.t.length);
    var diffs = el("div", { id: "diff" });
    for (var k = 0; k < n; k++) {
      var ta = ca.t[k], tb = cb.t[k];
      diffs.appendChild(el("div", { cls: "diff-turn" }, [
        el("h4", { text: "turn " + (k + 1) + (ta ? "" : " (only at step " + b + ")") + (tb ? "" : " (only at step " + a + ")") }),
        R.diffNode(ta ? ta.th : "", tb ? tb.th : ""),
        el("div", { cls: "small", text: "actions: " + (ta ? ta.a.join(" || ") || "(none)" : "—") + "  →  " + (tb ? tb.a.join(" || ") || "(none)" : "—") })
      ]));
    }
    section.appendChild(diffs);
  }

  function render() {
    var h = R.readHash();
    app.innerHTML = "";
    if (h.seed !== undefined) stateView(h); else matrix();
    window.scrollTo(0, 0);
  }
  Promise.all([R.load("states"), R.tiles()]).then(function (got) {
    D = got[0]; TILES = got[1];
    render();
    window.addEventListener("hashchange", render);
    document.body.setAttribute("data-ready", "1");
  }, function (e) { R.fail(app, e); });
})();
