// The operator page of minidb.batch: one vanilla ES module over the control API
// (docs/batch-api.md). No framework and no build step.
//
// Theory of operation
// - The token lives in sessionStorage (this tab's session, gone when it closes) and goes out as
//   `Authorization: Bearer` on every call; a 401 anywhere drops it and shows the login form.
// - The list is polled: `GET /tasks?limit=&cursor=` for the page on screen, and
//   `GET /tasks/{id}` for the task whose detail is open; every POLL_MS while a task on screen
//   is queued or running (its progress moves), every IDLE_POLL_MS otherwise or while the tab
//   is hidden (each poll costs the store a LIST and a GET per task shown). One poll at a time
//   (setTimeout after the previous one ends), so a slow server never piles requests up; an
//   action or a page change polls at once.
// - Paging: the API's cursors only go forward, so the page keeps the cursors of the pages it
//   came through on a stack and goes back by popping it.
// - Rows are keyed by task id and updated in place, so a progress bar moves smoothly and a
//   button under the pointer is not replaced between a poll and a click.
// - Data never becomes markup: every value reaches the DOM through textContent or an
//   attribute (task names come from users). Links are only made from http(s) URLs.
// - Buttons offer only the legal transitions (docs/batch.md, "The state machine"): retry on
//   failed/cancelled, cancel on created/queued/running (not once a cancel is pending).

const TOKEN_KEY = "minidb.batch.token";
const POLL_MS = 1000; // how often the list and the open detail are refreshed while busy
const IDLE_POLL_MS = 5000; // ... and while nothing on screen can change by itself
const ACTIVE = new Set(["queued", "running"]);
const URL_MARGIN_MS = 30_000; // presigned links are fetched again this long before they expire
const RETRYABLE = new Set(["failed", "cancelled"]);
const CANCELLABLE = new Set(["created", "queued", "running"]);

const $ = (id) => document.getElementById(id);

// --- the API --------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

// One call; resolves to the parsed JSON (or null for 204), throws ApiError with the
// problem+json `detail` (RFC 9457) or the status text.
async function api(method, path, { json, body, headers = {}, auth = token() } = {}) {
  const init = { method, headers: { ...headers, Authorization: `Bearer ${auth}` } };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, `the server cannot be reached (${err.message})`);
  }
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json().catch(() => null) : null;
  if (!response.ok) {
    const detail = (data && (data.detail || data.title)) || response.statusText;
    throw new ApiError(response.status, `${detail} (HTTP ${response.status})`);
  }
  return data;
}

// --- small DOM helpers ----------------------------------------------------------------------

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

// A button that is disabled while its action runs (no double retry from a double click).
function button(text, action, onClick) {
  const b = el("button", text, { type: "button", "data-action": action });
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await onClick();
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

function age(iso, now = Date.now()) {
  const s = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function safeHref(url) {
  try {
    const parsed = new URL(url, location.href);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

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

// --- the list ---------------------------------------------------------------------------------

const view = {
  cursors: [null], // the cursor of every page from the first to the one on screen
  next: null, // next_cursor of the page on screen
  rows: new Map(), // task id -> <tr>
  detailId: null,
  active: false, // a task on screen is queued or running
  outputs: null, // {id, attempt, files} of the open detail's output listing
  timer: null,
};

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
  renderList(await api("GET", `/tasks?${query}`));
}

// --- the detail -------------------------------------------------------------------------------

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
    tr.append(el("td", a.n), el("td", a.worker), el("td", a.started_at), el("td", a.ended_at ?? ""),
              el("td", a.outcome ?? "running"));
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

function openFromHash() {
  const match = /^#task\/([0-9A-Za-z]+)$/.exec(location.hash);
  view.detailId = match ? decodeURIComponent(match[1]) : null;
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
    refresh();
  }
}

// --- actions --------------------------------------------------------------------------------

async function act(id, action) {
  $("list-error").textContent = "";
  try {
    await api("POST", `/tasks/${encodeURIComponent(id)}/${action}`);
  } catch (err) {
    if (!handleAuth(err)) $("list-error").textContent = `${action}: ${err.message}`;
  }
  refresh();
}

function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
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
    if (!handleAuth(err)) {
      status.className = "error";
      status.textContent = `${step} failed: ${err.message}`;
    }
  } finally {
    $("upload-button").disabled = false;
  }
  refresh();
}

// --- session and polling ------------------------------------------------------------------------

function showLogin(message = "") {
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(view.timer);
  view.rows.clear();
  $("task-rows").replaceChildren();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

function showApp() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  openFromHash();
  refresh();
}

// A refused token ends the session; true when it did.
function handleAuth(err) {
  if (err instanceof ApiError && err.status === 401) {
    showLogin(`Logged out: the token was refused. ${err.message}`);
    return true;
  }
  return false;
}

let polling = false;
let again = false; // a refresh was asked for while one was running: run it right after

async function refresh() {
  clearTimeout(view.timer);
  if (polling) {
    again = true;
    return;
  }
  if (!token()) return;
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
        if (handleAuth(err)) return;
        $("detail-error").textContent = err.message;
      }
    }
  } catch (err) {
    if (handleAuth(err)) return;
    $("list-error").textContent = err.message;
  } finally {
    polling = false;
    const busy = view.active && !document.hidden;
    if (token()) view.timer = setTimeout(refresh, again ? 0 : busy ? POLL_MS : IDLE_POLL_MS);
  }
}

async function login(event) {
  event.preventDefault();
  const candidate = $("token").value.trim();
  $("login-error").textContent = "";
  try {
    // The smallest authenticated call: it proves the token before the session keeps it.
    await api("GET", "/tasks?limit=1", { auth: candidate });
  } catch (err) {
    $("login-error").textContent = err.status === 401
      ? `Login failed: the token was refused. ${err.message}`
      : `Login failed: ${err.message}`;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, candidate);
  $("token").value = "";
  showApp();
}

function start() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => showLogin());
  $("upload-form").addEventListener("submit", upload);
  $("detail-close").addEventListener("click", () => { location.hash = ""; });
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
  window.addEventListener("hashchange", openFromHash);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  if (token()) showApp();
  else showLogin();
}

start();
