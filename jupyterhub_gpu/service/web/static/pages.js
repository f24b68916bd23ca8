// The usage pages' daily charts: spend (bars, left axis) and GPU-hours (line, right axis).
// Data comes from the canvas's data-chart attribute; Chart.js is served next to this file.
(function () {
  "use strict";
  function draw(canvas) {
    if (typeof Chart === "undefined") {
      return;
    }
    var data = JSON.parse(canvas.getAttribute("data-chart"));
    canvas.chart = new Chart(canvas, {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: [
          { label: data.spend_label, data: data.spend.map(Number), yAxisID: "money", backgroundColor: "rgba(243, 118, 38, 0.6)" },
          { label: data.hours_label, data: data.gpu_hours.map(Number), yAxisID: "hours", type: "line", borderColor: "#1f77b4", backgroundColor: "#1f77b4", tension: 0 }
        ]
      },
      options: {
        animation: false,
        responsive: true,
        interaction: { mode: "index", intersect: false },
        scales: {
          money: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: data.spend_label } },
          hours: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: data.hours_label } }
        }
      }
    });
    canvas.setAttribute("data-drawn", "true");
  }
  document.querySelectorAll("canvas[data-chart]").forEach(draw);
})();
