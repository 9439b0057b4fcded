/* primuspp viz: draws PP.sections with plotly, keeps their time axes together, switches iterations, and
   writes what it drew into #pp-status (boxes per rank, errors) for tests and the curious. No network. */
(function () {
  "use strict";
  var status = { ready: false, errors: window.ppErrors, sections: [] };
  var CONFIG = { responsive: true, displaylogo: false };
  var range = PP.xRange ? PP.xRange.slice() : null;
  var syncing = false;

  function plot(i) { return document.getElementById("plot-" + i); }

  function writeStatus() {
    document.getElementById("pp-status").textContent = JSON.stringify(status);
  }

  function boxesPerRank(gd) {
    var counts = [];
    for (var r = 0; r < gd.layout.meta.pp; r++) counts.push(0);
    gd._fullData.forEach(function (t) {
      if (!t.meta || t.meta.role !== "boxes" || t.visible !== true) return;
      for (var k = 0; k < t._length; k++) counts[t.y[k]] += 1;
    });
    return counts;
  }

  function report(i) {
    var gd = plot(i), s = PP.sections[i];
    status.sections[i] = {
      label: s.label,
      iteration: s.current,
      mode: gd.layout.meta.mode,
      boxes_per_rank: boxesPerRank(gd),
      svg_bars: gd.querySelectorAll(".barlayer .point").length
    };
  }

  function draw(i, it) {
    var s = PP.sections[i], fig = s.figures[it];
    s.current = it;
    var layout = Object.assign({}, fig.layout);
    if (range) layout.xaxis = Object.assign({}, fig.layout.xaxis, { range: range.slice() });
    document.getElementById("summary-" + i).innerHTML = s.summaries[it];
    return Plotly.react(plot(i), fig.data, layout, CONFIG).then(function () { report(i); });
  }

  function follow(i) {
    return function (ev) {
      if (syncing) return;
      var r = null;
      ["xaxis", "xaxis2"].forEach(function (ax) {
        if (r) return;
        if (ev[ax + ".range[0]"] !== undefined) r = [ev[ax + ".range[0]"], ev[ax + ".range[1]"]];
        else if (ev[ax + ".range"]) r = ev[ax + ".range"].slice();
        else if (ev[ax + ".autorange"]) r = PP.xRange.slice();
      });
      if (!r) return;
      range = r;
      syncing = true;
      var jobs = PP.sections.map(function (_, j) {
        return Plotly.relayout(plot(j), { "xaxis.range": r.slice() });
      });
      Promise.all(jobs).then(function () { syncing = false; }, function () { syncing = false; });
    };
  }

  var wanted = (location.hash.match(/iteration=([^&]+)/) || [])[1];
  var jobs = PP.sections.map(function (s, i) {
    var it = wanted !== undefined && s.figures[decodeURIComponent(wanted)] ? decodeURIComponent(wanted) : s.selected;
    var pick = document.getElementById("pick-" + i);
    if (pick) {
      pick.value = it;
      pick.addEventListener("change", function () { draw(i, pick.value).then(writeStatus); });
    }
    return draw(i, it).then(function () { plot(i).on("plotly_relayout", follow(i)); });
  });
  Promise.all(jobs).then(
    function () { status.ready = true; writeStatus(); },
    function (e) { status.errors.push(String(e && e.stack || e)); writeStatus(); }
  );
})();
