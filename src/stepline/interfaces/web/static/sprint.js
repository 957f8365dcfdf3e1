// The sprint board follows the loop: on each `changed` event of /api/sprint/stream (the board, deferred-work.md
// or a story's run changed) the page fetches itself and puts the new board in place, without a reload.
(function () {
  "use strict";
  var root = document.getElementById("sprint");
  if (!root || !window.EventSource || !window.fetch) { return; }
  var live = document.getElementById("sprint-live");
  var fetching = false, again = false;

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(window.location.href, { credentials: "same-origin" }).then(function (answer) {
      if (!answer.ok) { throw new Error(String(answer.status)); }
      return answer.text();
    }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("sprint");
      if (fresh) {
        var shown = !live.hidden;
        root.innerHTML = fresh.innerHTML;
        live = document.getElementById("sprint-live");
        live.hidden = !shown;
      }
    }).catch(function () { /* the next change tries again */ }).then(function () {
      fetching = false;
      if (again) { again = false; refresh(); }
    });
  }

  var source = new EventSource("/api/sprint/stream");
  source.addEventListener("open", function () { live.hidden = false; });
  source.addEventListener("error", function () { live.hidden = true; });
  source.addEventListener("changed", refresh);
})();
