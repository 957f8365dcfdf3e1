// The run page follows its journal: one server-sent event per new record appends a timeline row and moves the
// step's and the run's status. When the run stops (blocked, completed, failed) and its process has let it go (no
// driver), the page reloads once, to show the next question's buttons, the artifacts and the decisions as the
// server renders them. A run this server continues (a gate was just decided here) is followed the same way; one
// that could not go on (the continuation ended with nothing journaled) reloads to say why.
(function () {
  "use strict";
  var root = document.getElementById("run");
  if (!root || !window.EventSource) { return; }
  var runId = root.dataset.runId;
  if (root.dataset.status === "starting") {  // no manifest yet: look again once the first steps are under way
    window.setTimeout(function () { window.location.reload(); }, 500);
    return;
  }
  var lastSeq = parseInt(root.dataset.lastSeq || "0", 10);
  var stepStatus = {
    WorkflowStepStarted: "running", WorkflowStepCompleted: "completed", WorkflowStepFailed: "failed",
    StepBlocked: "blocked", StepSkipped: "skipped", StepRetry: "pending"
  };
  var runStatus = {
    WorkflowStarted: "running", WorkflowResumed: "running", WorkflowCompleted: "completed",
    WorkflowFailed: "failed", WorkflowBlocked: "blocked"
  };
  var live = document.getElementById("live");
  var continuing = root.dataset.continuing === "1";  // as rendered: this server was continuing the run
  var driverPid = null;
  var stopped = false;  // the run stopped since the page was rendered (a journal event said so)

  function cell(row, text, className) {
    var td = document.createElement("td");
    td.textContent = text;
    if (className) { td.className = className; }
    row.appendChild(td);
    return td;
  }

  function badge(td, status) {
    td.textContent = "";
    var span = document.createElement("span");
    span.className = "badge " + status;
    span.textContent = status;
    td.appendChild(span);
  }

  function stepRow(stepId) {
    var body = document.querySelector("#steps tbody");
    var rows = body.querySelectorAll("tr[data-step-id]");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].dataset.stepId === stepId) { return rows[i]; }
    }
    var row = document.createElement("tr");  // a step the flow added while running
    row.dataset.stepId = stepId;
    cell(row, stepId); cell(row, stepId); badge(cell(row, ""), "pending");
    cell(row, "0"); cell(row, ""); cell(row, ""); cell(row, "");
    body.appendChild(row);
    return row;
  }

  function onEvent(ev) {
    if (ev.seq <= lastSeq) { return; }
    lastSeq = ev.seq;
    var row = document.createElement("tr");
    row.className = "new";
    cell(row, String(ev.seq)); cell(row, (ev.time || "").slice(11, 23)); cell(row, ev.step_id || "");
    cell(row, ev.type); cell(row, ev.detail || "");
    document.querySelector("#timeline tbody").appendChild(row);
    if (ev.step_id && stepStatus[ev.type]) {
      var step = stepRow(ev.step_id);
      var cells = step.querySelectorAll("td");
      badge(cells[2], stepStatus[ev.type]);
      if (ev.type === "WorkflowStepStarted") {
        cells[3].textContent = String(parseInt(cells[3].textContent || "0", 10) + 1);
        cells[4].textContent = (ev.time || "").slice(11, 19);
      } else if (ev.type !== "StepRetry") {
        cells[5].textContent = (ev.time || "").slice(11, 19);
        cells[6].textContent = ev.detail || "";
      }
    }
    if (runStatus[ev.type]) {
      var status = runStatus[ev.type];
      var shown = document.getElementById("run-status");
      shown.textContent = status;
      shown.className = "badge " + status;
      if (status !== "running") { stopped = true; reloadWhenLetGo(); }
    }
  }

  function reloadWhenLetGo() {  // the process that stopped the run releases its lock just after its last record
    if (stopped && driverPid === null) { reloadSoon(); }
  }

  var reloading = false;
  function reloadSoon() {
    if (reloading) { return; }
    reloading = true;
    window.setTimeout(function () { window.location.reload(); }, 300);
  }

  var source = new EventSource("/api/runs/" + encodeURIComponent(runId) + "/stream?after=" + lastSeq);
  // "live" says a process drives the run now (it holds the run's lock), not merely that this page listens.
  source.addEventListener("driver", function (message) {
    var pid = JSON.parse(message.data).pid;
    driverPid = pid;
    reloadWhenLetGo();
    if (live) {
      live.hidden = pid === null;
      live.title = pid === null ? "" : "a process (pid " + pid + ") drives this run now";
    }
  });
  source.addEventListener("error", function () { if (live) { live.hidden = true; } });  // we cannot tell now
  source.addEventListener("journal", function (message) { onEvent(JSON.parse(message.data)); });
  source.addEventListener("continuation", function (message) {
    var state = JSON.parse(message.data);
    if (continuing && state && !state.active) { stopped = true; reloadWhenLetGo(); }  // ended since rendered
  });
  source.addEventListener("reset", function () { source.close(); reloadSoon(); });
  source.addEventListener("damaged", function () { source.close(); reloadSoon(); });
})();
