// runlog dashboard: the little behaviour htmx does not give. The pages work
// without it; it shows the controls that need JavaScript, remembers the
// auto-refresh pause, ticks every job box at once, and holds a list's
// refresh while jobs are ticked in it.
(function () {
  "use strict";
  var KEY = "runlog.refreshPaused";
  function paused() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }
  function setup() {
    document.querySelectorAll(".js-only").forEach(function (el) { el.hidden = false; });
    var box = document.getElementById("pause-refresh");
    if (box) { box.checked = paused(); }
  }
  document.addEventListener("DOMContentLoaded", setup);
  document.addEventListener("htmx:afterSettle", setup);
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (!t) { return; }
    if (t.id === "pause-refresh") {
      try { window.localStorage.setItem(KEY, t.checked ? "1" : "0"); } catch (err) { /* private mode */ }
    }
    if (t.id === "select-all") {
      document.querySelectorAll("input[name=id]").forEach(function (c) { c.checked = t.checked; });
    }
  });
  // A paused page skips its periodic refresh requests.
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail && e.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-refresh")) { return; }
    // A list with ticked jobs, or a focused field, is not replaced under
    // the user's hand.
    var busy = elt.querySelector("input[name=id]:checked") ||
      (document.activeElement && elt.contains(document.activeElement) && document.activeElement !== document.body);
    if (paused() || busy) { e.preventDefault(); }
  });
})();
