// The Batch view: the task list, a task's detail, the import upload and the export form.
//
// Theory of operation
// - The list is polled while the view is on screen: `GET /tasks?limit=&cursor=[&user=]` for
//   the page on screen, and `GET /tasks/{id}` for the task whose detail is open; every
//   POLL_MS while a task on screen is queued or running (its progress moves), every
//   IDLE_POLL_MS otherwise or while the tab is hidden (each poll costs the store a LIST and a
//   GET per task shown). One poll at a time (setTimeout after the previous one ends), so a
//   slow server never piles requests up; an action or a page change polls at once.
// - Paging: the API's cursors only go forward, so the page keeps the cursors of the pages it
//   came through on a stack and goes back by popping it. Operators may list one user's tasks
//   (`user=`); changing the filter starts from the first page.
// - Rows are keyed by task id and updated in place, so a progress bar moves smoothly and a
//   button under the pointer is not replaced between a poll and a click.
// - Buttons offer only the legal transitions (docs/batch.md, "The state machine"): retry on
//   failed/cancelled, cancel on created/queued/running (not once a cancel is pending).

import { api, token } from "./api.js";
import { $, age, button, el, safeHref } from "./dom.js";

const POLL_MS = 1000; // how often the list and the open detail are refreshed while busy
const IDLE_POLL_MS = 5000; // ... and while nothing on screen can change by itself
const ACTIVE = new Set(["queued", "running"]);
const URL_MARGIN_MS = 30_000; // presigned links are fetched again this long before they expire
const RETRYABLE = new Set(["failed", "cancelled"]);
const CANCELLABLE = new Set(["created", "queued", "running"]);

// --- what a task shows -----------------------------------------------------------------------

function stateText(task) {
  return task.state === "running" && task.cancel_requested ? "cancelling" : task.state;
}

// Percent of the input read (rows are counted as they go, the total of rows is not known
// before the end); null while unknown.
function percent(task) {
  const p = task.progress || {};
  if (p.bytes_total) return Math.min(100, Math.floor((100 * (p.bytes_done || 0)) / p.bytes_total));
  if (task.state === "succeeded") return 100;
  if (task.state === "created" || task.state === "queued") return 0;
  return null;
}

function progressText(task) {
  const p = task.progress || {};
  const rows = p.rows_done || 0;
  const pct = percent(task);
  const parts = [`${rows} rows`];
  if (p.rows_failed) parts.push(`${p.rows_failed} bad`);
  if (pct !== null) parts.push(`${pct}%`);
  return parts.join(" · ");
}

// Attempts spent in the current budget, as the state machine counts them.
function spent(task) {
  return (task.attempts || []).filter((a) => a.n > task.budget_from && a.outcome !== "released")
    .length;
}

function errorText(task) {
  return task.error ? `${task.error.code}: ${task.error.message}` : "";
}

function progressBar(task) {
  const bar = el("div", null, { class: "bar", role: "progressbar", "aria-valuemin": "0",
                                "aria-valuemax": "100" });
  const track = el("div", null, { class: "track" });
  track.append(el("div", null, { class: "fill" }));
  bar.append(track, el("span", null, { class: "bar-text" }));
  updateBar(bar, task);
  return bar;
}

function updateBar(bar, task) {
  const pct = percent(task);
  if (pct === null) bar.removeAttribute("aria-valuenow");
  else bar.setAttribute("aria-valuenow", String(pct));
  bar.dataset.state = task.state;
  bar.firstChild.firstChild.style.width = `${pct ?? 0}%`;
  bar.lastChild.textContent = progressText(task);
}

function legalActions(task) {
  const out = [];
  if (RETRYABLE.has(task.state)) out.push("retry");
  if (CANCELLABLE.has(task.state) && !task.cancel_requested) out.push("cancel");
  return out;
}

function idempotencyKey() {
  const random = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(random, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function createBatchView(session) {
  const view = {
    visible: false,
    cursors: [null], // the cursor of every page from the first to the one on screen
    next: null, // next_cursor of the page on screen
    user: "", // operators: list only this user's tasks
    rows: new Map(), // task id -> <tr>
    detailId: null,
    active: false, // a task on screen is queued or running
    outputs: null, // {id, attempt, files} of the open detail's output listing
    timer: null,
  };

  // The task's buttons in `box`, rebuilt only when the legal actions change, so a poll never
  // swaps a button out from under a click.
  function setActions(box, task) {
    const actions = legalActions(task);
    const key = `${task.id}:${actions.join(",")}`;
    if (box.dataset.actions === key) return;
    box.dataset.actions = key;
    box.replaceChildren(...actions.map((action) => button(
      action === "retry" ? "Retry" : "Cancel", action, () => act(task.id, action),
    )));
  }

  // --- the list -------------------------------------------------------------------------------

  function pageSize() {
    return Number($("page-size").value);
  }

  function renderRow(tr, task) {
    tr.dataset.state = task.state;
    tr.dataset.taskId = task.id;
    const cells = tr.children;
    const name = cells[0].firstChild;
    name.textContent = task.name || task.id;
    name.title = task.id;
    cells[1].textContent = task.type;
    cells[2].textContent = stateText(task);
    updateBar(cells[3].firstChild, task);
    cells[4].textContent = `${spent(task)}/${task.max_attempts}`;
    cells[4].title = `attempt ${task.attempt} in all`;
    cells[5].textContent = errorText(task);
    cells[6].textContent = task.created_by;
    cells[7].textContent = age(task.created_at);
    cells[7].title = task.created_at;
    setActions(cells[8], task);
  }

  function newRow(task) {
    const tr = el("tr", null, { class: "task" });
    const open = el("a", null, { href: `#task/${encodeURIComponent(task.id)}`, class: "name" });
    const first = el("td");
    first.append(open);
    tr.append(first, el("td"), el("td", null, { class: "state" }), el("td"), el("td"),
              el("td", null, { class: "error-text" }), el("td"), el("td"),
              el("td", null, { class: "actions" }));
    tr.children[3].append(progressBar(task));
    return tr;
  }

  function renderList(page) {
    const body = $("task-rows");
    const seen = new Set();
    for (const task of page.tasks) {
      let tr = view.rows.get(task.id);
      if (!tr) {
        tr = newRow(task);
        view.rows.set(task.id, tr);
      }
      renderRow(tr, task);
      body.append(tr); // append moves an existing row: the order is the API's, newest first
      seen.add(task.id);
    }
    for (const [id, tr] of view.rows) {
      if (!seen.has(id)) {
        tr.remove();
        view.rows.delete(id);
      }
    }
    view.next = page.next_cursor;
    view.active = page.tasks.some((task) => ACTIVE.has(task.state));
    $("no-tasks").hidden = page.tasks.length > 0;
    $("older").disabled = !view.next;
    $("newer").disabled = view.cursors.length < 2;
    $("page-number").textContent = `page ${view.cursors.length}`;
  }

  async function loadList() {
    const cursor = view.cursors[view.cursors.length - 1];
    const query = new URLSearchParams({ limit: String(pageSize()) });
    if (cursor) query.set("cursor", cursor);
    if (view.user) query.set("user", view.user);
    renderList(await api("GET", `/tasks?${query}`));
  }

  // --- the detail -----------------------------------------------------------------------------

  function field(dl, name, value) {
    dl.append(el("dt", name), el("dd", value ?? "", { "data-field": name }));
  }

  function renderDetail(task) {
    $("detail").dataset.taskId = task.id;
    $("detail").dataset.state = task.state;
    $("detail-title").textContent = task.name || task.id;
    const dl = $("detail-fields");
    dl.replaceChildren();
    field(dl, "id", task.id);
    field(dl, "type", task.type);
    field(dl, "state", stateText(task));
    field(dl, "progress", progressText(task));
    field(dl, "attempts", `${spent(task)} of ${task.max_attempts} spent (attempt ${task.attempt})`);
    field(dl, "params", JSON.stringify(task.params));
    field(dl, "result", task.result ? JSON.stringify(task.result) : "");
    field(dl, "error", errorText(task));
    field(dl, "created by", task.created_by);
    field(dl, "created", `${task.created_at} (${age(task.created_at)} ago)`);
    field(dl, "updated", task.updated_at);
    if (task.not_before) field(dl, "not before", task.not_before);
    setActions($("detail-actions"), task);
    $("attempt-rows").replaceChildren(...(task.attempts || []).map((a) => {
      const tr = el("tr");
      tr.append(el("td", a.n), el("td", a.worker), el("td", a.started_at),
                el("td", a.ended_at ?? ""), el("td", a.outcome ?? "running"));
      return tr;
    }));
  }

  function renderOutputs(files) {
    $("outputs").replaceChildren(...files.map((f) => {
      const li = el("li");
      const href = safeHref(f.url);
      if (href) {
        li.append(el("a", f.name, { href, download: f.name, "data-file": f.name }));
      } else {
        li.append(el("span", f.name));
      }
      li.append(el("span", ` ${f.size} bytes`, { class: "hint" }));
      return li;
    }));
  }

  function outputsStale(task) {
    const o = view.outputs;
    if (!task.output) return false;
    if (!o || o.id !== task.id || o.attempt !== task.output.attempt) return true;
    return o.files.some((f) => Date.parse(f.expires_at) - Date.now() < URL_MARGIN_MS);
  }

  async function loadDetail() {
    const id = view.detailId;
    const task = await api("GET", `/tasks/${encodeURIComponent(id)}`);
    if (id !== view.detailId) return;
    renderDetail(task);
    view.active ||= ACTIVE.has(task.state);
    if (!task.output) {
      view.outputs = null;
      $("outputs").replaceChildren(el("li", "none yet", { class: "hint" }));
    } else if (outputsStale(task)) {
      const out = await api("GET", `/tasks/${encodeURIComponent(id)}/output`);
      if (id !== view.detailId) return;
      view.outputs = { id, attempt: out.attempt, files: out.files };
      renderOutputs(out.files);
    }
  }

  // Open the detail of `id` (null closes it).
  function openDetail(id) {
    view.detailId = id;
    view.outputs = null;
    $("detail").hidden = view.detailId === null;
    $("detail-error").textContent = "";
    delete $("detail-actions").dataset.actions;
    $("detail-actions").replaceChildren();
    if (view.detailId) {
      $("detail-title").textContent = view.detailId;
      $("detail-fields").replaceChildren();
      $("attempt-rows").replaceChildren();
      $("outputs").replaceChildren();
    }
  }

  // --- actions --------------------------------------------------------------------------------

  async function act(id, action) {
    $("list-error").textContent = "";
    try {
      await api("POST", `/tasks/${encodeURIComponent(id)}/${action}`);
    } catch (err) {
      if (!session.handleAuth(err)) $("list-error").textContent = `${action}: ${err.message}`;
    }
    refresh();
  }

  // create -> PUT the file -> submit; each step's failure is shown with the API's detail.
  async function upload(event) {
    event.preventDefault();
    const status = $("upload-status");
    const file = $("upload-file").files[0];
    if (!file) return;
    const params = {};
    const maxBad = $("upload-max-bad").value.trim();
    if (maxBad !== "") params.max_bad_rows = Number(maxBad);
    const name = $("upload-name").value.trim() || file.name;
    $("upload-button").disabled = true;
    status.className = "";
    let step = "create";
    try {
      status.textContent = "creating the task…";
      const task = await api("POST", "/tasks", {
        json: { type: "csv_import", name: name.slice(0, 200), params },
        headers: { "Idempotency-Key": idempotencyKey() },
      });
      const path = `/tasks/${encodeURIComponent(task.id)}`;
      step = "upload";
      status.textContent = `uploading ${file.size} bytes…`;
      await api("PUT", `${path}/input`, { body: file, headers: { "Content-Type": "text/csv" } });
      step = "submit";
      await api("POST", `${path}/submit`);
      status.textContent = `submitted ${task.id}`;
      $("upload-form").reset();
      if (view.cursors.length > 1) view.cursors = [null]; // show the new task on the first page
    } catch (err) {
      if (!session.handleAuth(err)) {
        status.className = "error";
        status.textContent = `${step} failed: ${err.message}`;
      }
    } finally {
      $("upload-button").disabled = false;
    }
    refresh();
  }

  // A csv_export of one bucket: create -> submit (it needs no input).
  async function exportBucket(event) {
    event.preventDefault();
    const status = $("export-status");
    const bucket = $("export-bucket").value.trim();
    const name = $("export-name").value.trim() || `export of ${bucket}`;
    $("export-button").disabled = true;
    status.className = "";
    let step = "create";
    try {
      const task = await api("POST", "/tasks", {
        json: { type: "csv_export", name: name.slice(0, 200), params: { bucket } },
        headers: { "Idempotency-Key": idempotencyKey() },
      });
      step = "submit";
      await api("POST", `/tasks/${encodeURIComponent(task.id)}/submit`);
      status.textContent = `submitted ${task.id}`;
      $("export-form").reset();
      if (view.cursors.length > 1) view.cursors = [null];
    } catch (err) {
      if (!session.handleAuth(err)) {
        status.className = "error";
        status.textContent = `${step} failed: ${err.message}`;
      }
    } finally {
      $("export-button").disabled = false;
    }
    refresh();
  }

  function filterByUser(event) {
    event.preventDefault();
    view.user = $("user-filter").value.trim();
    view.cursors = [null];
    $("list-error").textContent = "";
    refresh();
  }

  // --- polling --------------------------------------------------------------------------------

  let polling = false;
  let again = false; // a refresh was asked for while one was running: run it right after

  async function refresh() {
    clearTimeout(view.timer);
    if (polling) {
      again = true;
      return;
    }
    if (!token() || !view.visible) return;
    polling = true;
    again = false;
    try {
      await loadList();
      $("list-error").textContent = "";
      if (view.detailId) {
        try {
          await loadDetail();
          $("detail-error").textContent = "";
        } catch (err) {
          if (session.handleAuth(err)) return;
          $("detail-error").textContent = err.message;
        }
      }
    } catch (err) {
      if (session.handleAuth(err)) return;
      $("list-error").textContent = err.message;
    } finally {
      polling = false;
      const busy = view.active && !document.hidden;
      if (token() && view.visible) {
        view.timer = setTimeout(refresh, again ? 0 : busy ? POLL_MS : IDLE_POLL_MS);
      }
    }
  }

  function start() {
    $("upload-form").addEventListener("submit", upload);
    $("export-form").addEventListener("submit", exportBucket);
    $("user-filter-form").addEventListener("submit", filterByUser);
    $("detail-close").addEventListener("click", () => { location.hash = "#batch"; });
    $("older").addEventListener("click", () => {
      if (view.next) view.cursors.push(view.next);
      refresh();
    });
    $("newer").addEventListener("click", () => {
      if (view.cursors.length > 1) view.cursors.pop();
      refresh();
    });
    $("page-size").addEventListener("change", () => {
      view.cursors = [null];
      refresh();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh();
    });
  }

  // On screen, with the detail of `detailId` open (null: none).
  function show(detailId) {
    view.visible = true;
    if (detailId !== view.detailId) openDetail(detailId);
    refresh();
  }

  function hide() {
    view.visible = false;
    clearTimeout(view.timer);
  }

  // Logged out: forget what the last user saw.
  function reset() {
    hide();
    view.rows.clear();
    view.cursors = [null];
    view.user = "";
    $("user-filter").value = "";
    $("task-rows").replaceChildren();
    openDetail(null);
  }

  return { start, show, hide, reset };
}
