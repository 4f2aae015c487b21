// ragen view: "thoughts over training" on the overview: distinct thoughts of any logged
// steps the user picks, side by side, each linked to its episode. The picks are in the
// URL (#th=1,50,100&n=6).
(function () {
  "use strict";
  var R = window.RAGEN, el = R.el;
  var app = document.getElementById("thoughts-app");
  if (!app) return;

  function defaults(steps) {
    if (steps.length <= 3) return steps.map(function (s) { return s.step; });
    return [steps[0].step, steps[Math.floor((steps.length - 1) / 2)].step, steps[steps.length - 1].step];
  }
  function render(D) {
    var h = R.readHash();
    var picked = h.th ? h.th.split(",").filter(Boolean).map(Number) : defaults(D.steps);
    var n = Math.max(1, Math.min(24, parseInt(h.n, 10) || 6));
    app.innerHTML = "";
    var chips = el("div", { cls: "chips", id: "thought-steps" }, [el("span", { cls: "small", text: "steps: " })]);
    D.steps.forEach(function (s) {
      var on = picked.indexOf(s.step) >= 0;
      var b = el("button", { cls: "chip" + (on ? " on" : ""), "data-step": String(s.step), text: String(s.step), title: s.label });
      b.onclick = function () {
        var next = on ? picked.filter(function (x) { return x !== s.step; }) : picked.concat([s.step]);
        next.sort(function (a, b) { return a - b; });
        R.setHash({ th: next.join(","), n: n });
        render(D);
      };
      chips.appendChild(b);
    });
    var count = el("input", { type: "number", id: "thought-n", min: "1", max: "24", value: String(n) });
    count.onchange = function () { R.setHash({ th: picked.join(","), n: count.value }); render(D); };
    app.appendChild(chips);
    app.appendChild(el("p", { cls: "small" }, ["thoughts per step ", count]));
    var cols = el("div", { cls: "thoughts", id: "thought-columns", style: "grid-template-columns: repeat(" + Math.max(1, picked.length) + ", minmax(220px, 1fr))" });
    picked.forEach(function (step) {
      var s = D.steps.filter(function (x) { return x.step === step; })[0];
      if (!s) return;
      var items = s.samples.slice(0, n).map(function (pair) {
        return el("a", { href: s.page + R.hash({ ep: pair[1] }), cls: "thought-link" }, [el("pre", { text: pair[0] })]);
      });
      cols.appendChild(el("div", { "data-step": String(step) }, [el("h3", { text: s.label })].concat(items.length ? items : [el("p", { text: "(no thoughts)" })])));
    });
    app.appendChild(cols);
  }
  R.load("thoughts").then(function (D) {
    if (!D.steps.length) { app.innerHTML = "<p class=small>(no thoughts logged)</p>"; return; }
    render(D);
    document.body.setAttribute("data-ready", "1");
  }, function (e) { R.fail(app, e); });
})();
