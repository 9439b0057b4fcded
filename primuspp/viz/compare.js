/* primuspp compare: draws PP.figure and writes what it drew into #pp-status. No network. */
(function () {
  "use strict";
  var status = { ready: false, errors: window.ppErrors };
  function done() {
    var gd = document.getElementById("plot-compare");
    status.ready = true;
    status.bars = gd.querySelectorAll(".barlayer .point").length;
    document.getElementById("pp-status").textContent = JSON.stringify(status);
  }
  Plotly.newPlot("plot-compare", PP.figure.data, PP.figure.layout, { responsive: true, displaylogo: false })
    .then(done, function (e) { status.errors.push(String(e)); done(); });
})();
