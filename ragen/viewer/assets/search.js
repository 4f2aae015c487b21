// ragen view: text search over every trajectories file of a run (search.html).
// Walks data/files.js's files one at a time, loading each one's turns, and lists the
// turns whose thought, answer or observation contains the query, and, unless the "raw
// replies too" toggle is off, those whose raw reply does while its parsed thought and
// answer do not (a malformed reply has none: early in training that is most replies);
// each hit links to its turn. The query is in the URL (#q=...&in=th&kind=val&noraw=1).
(function () {
  "use strict";
  var R = window.RAGEN, el = R.el;
  var app = document.getElementById("app");
  var MAX_HITS = 500;
  var run = 0;  // bumped by every new search: an older walk stops

  function form(state) {
    var q = el("input", { id: "q", type: "search", size: "40", value: state.q || "", placeholder: "a word or phrase" });
    var field = el("select", { id: "in" }, R.SEARCH_FIELDS.map(function (o) {
      var opt = el("option", { value: o[0], text: o[1] });
      if ((state["in"] || "all") === o[0]) opt.selected = true;
      return opt;
    }));
    var kind = el("select", { id: "kind" }, [["", "every file"], ["train", "training steps"], ["val", "validation steps"], ["branch", "abandoned branches"]].map(function (o) {
      var opt = el("option", { value: o[0], text: o[1] });
      if ((state.kind || "") === o[0]) opt.selected = true;
      return opt;
    }));
    var raw = el("input", { id: "raw", type: "checkbox" });
    raw.checked = !state.noraw;
    var go = el("button", { id: "go", text: "search" });
    var f = el("form", { cls: "filters", id: "search-form" }, [el("label", {}, ["find ", q]), el("label", {}, ["in ", field]), el("label", {}, [raw, " raw replies too"]), el("label", {}, ["of ", kind]), go]);
    f.onsubmit = function (e) {
      e.preventDefault();
      location.hash = R.hash({ q: q.value.trim(), "in": field.value === "all" ? "" : field.value, noraw: !raw.checked, kind: kind.value });
    };
    return f;
  }
  function wanted(f, kind) {
    if (!kind) return true;
    if (kind === "branch") return !!f.branch;
    return f.kind === kind && !f.branch;
  }

  function search(state, files) {
    var mine = ++run, q = state.q, field = state["in"] || "all", raw = !state.noraw;
    var list = el("ol", { id: "hits" });
    var status = el("p", { cls: "small", id: "status", text: "searching…" });
    app.appendChild(status);
    app.appendChild(list);
    var n = 0, done = 0;
    var todo = files.filter(function (f) { return wanted(f, state.kind); });
    function next(k) {
      if (mine !== run) return;
      if (k >= todo.length || n >= MAX_HITS) {
        status.textContent = n + " hit" + (n === 1 ? "" : "s") + " for “" + q + "” in " + done + " of " + todo.length + " files" + (n >= MAX_HITS ? " (stopped at " + MAX_HITS + ")" : "");
        document.body.setAttribute("data-done", "1");
        return;
      }
      var f = todo[k], jobs = [R.load(f.stem)];
      for (var c = 0; c < f.chunks; c++) jobs.push(R.load(f.stem + ".c" + c));
      Promise.all(jobs).then(function (got) {
        var index = got[0];
        got.slice(1).forEach(function (records, c) {
          records.forEach(function (rec, j) {
            var i = c * index.chunk + j, ep = index.episodes[i];
            if (!ep) return;
            R.compactTurns(rec, ep).forEach(function (t, turn) {
              R.searchHits(t, q, field, raw).forEach(function (pair) {
                if (n >= MAX_HITS) return;
                n++;
                var href = f.page + R.hash({ q: q, "in": field === "all" ? "" : field, noraw: !raw, ep: i, turn: turn });
                var snippet = el("span", { cls: "snippet" });
                snippet.appendChild(R.marked(R.around(pair[1], q, 160), q));
                list.appendChild(el("li", { cls: "hit" }, [
                  el("a", { href: href, cls: "hit-link" }, [f.label + " · episode " + ep.e + " · turn " + (turn + 1) + " · " + pair[0]]),
                  " ", el("span", { cls: "badge " + (ep.ok ? "good" : "bad"), text: ep.ok ? "success" : "failure" }),
                  el("div", {}, [snippet])
                ]));
              });
            });
          });
        });
        R.forget(f.stem);
        for (var c = 0; c < f.chunks; c++) R.forget(f.stem + ".c" + c);
        done++;
        status.textContent = "searching… " + done + " of " + todo.length + " files, " + n + " hits";
        next(k + 1);
      }, function (e) { status.textContent = String(e); });
    }
    next(0);
  }

  function render(files) {
    var state = R.readHash();
    app.innerHTML = "";
    document.body.removeAttribute("data-done");
    app.appendChild(form(state));
    if (state.q) search(state, files);
  }
  R.load("files").then(function (d) {
    render(d.files);
    window.addEventListener("hashchange", function () { render(d.files); });
    document.body.setAttribute("data-ready", "1");
  }, function (e) { R.fail(app, e); });
})();
