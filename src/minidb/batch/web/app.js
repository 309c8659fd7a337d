// The operator page of minidb: vanilla ES modules over the control API (docs/batch-api.md). No
// framework and no build step; the one library, uPlot (the charts), is vendored.
//
// Theory of operation
// - This module is the shell: the session (log in with a token, `GET /me` for the name and
//   role shown in the header, log out), and the three views, chosen by the URL's hash:
//   `#store` (store.js), `#server` (server.js), `#batch` or `#task/<id>` (batch.js; also the
//   default). Only the view on screen polls.
// - A 401 anywhere drops the token and shows the login form (`handleAuth`).
// - The role only decides what the page offers (operators see the store's change buttons and
//   the task list's user filter); the API checks every request itself.
// - Data never becomes markup: every value reaches the DOM through textContent or an attribute
//   (dom.js), and the Content-Security-Policy of index.html runs nothing but these files.

import { ApiError, api, forgetToken, keepToken, token } from "./api.js";
import { createBatchView } from "./batch.js";
import { $ } from "./dom.js";
import { createServerView } from "./server.js";
import { createStoreView } from "./store.js";

const VIEWS = ["store", "server", "batch"];

const session = {
  me: null, // {user, role} of the token, from GET /me
  role() {
    return this.me ? this.me.role : "user";
  },
  // A refused token ends the session; true when it did.
  handleAuth(err) {
    if (err instanceof ApiError && err.status === 401) {
      showLogin(`Logged out: the token was refused. ${err.message}`);
      return true;
    }
    return false;
  },
};

const views = {
  store: createStoreView(session),
  server: createServerView(session),
  batch: createBatchView(session),
};

function route() {
  if (!token() || !session.me) return;
  const task = /^#task\/([0-9A-Za-z]+)$/.exec(location.hash);
  const name = task ? "batch" : VIEWS.find((v) => location.hash === `#${v}`) || "batch";
  for (const v of VIEWS) {
    const on = v === name;
    $(`view-${v}`).hidden = !on;
    $(`tab-${v}`).classList.toggle("current", on);
    if (on) $(`tab-${v}`).setAttribute("aria-current", "page");
    else $(`tab-${v}`).removeAttribute("aria-current");
    if (!on) views[v].hide();
  }
  if (name === "batch") views.batch.show(task ? decodeURIComponent(task[1]) : null);
  else views[name].show();
}

function showLogin(message = "") {
  forgetToken();
  session.me = null;
  for (const v of VIEWS) views[v].reset();
  $("app").hidden = true;
  $("tabs").hidden = true;
  $("me").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

function showApp(me) {
  session.me = me;
  $("me-user").textContent = me.user;
  $("me-role").textContent = me.role;
  $("me").dataset.role = me.role;
  for (const node of document.querySelectorAll(".operator-only")) {
    node.hidden = me.role !== "operator";
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("tabs").hidden = false;
  $("me").hidden = false;
  $("logout").hidden = false;
  route();
}

async function login(event) {
  event.preventDefault();
  const candidate = $("token").value.trim();
  $("login-error").textContent = "";
  let me;
  try {
    // The smallest authenticated call: it proves the token before the session keeps it.
    me = await api("GET", "/me", { auth: candidate });
  } catch (err) {
    $("login-error").textContent = err.status === 401
      ? `Login failed: the token was refused. ${err.message}`
      : `Login failed: ${err.message}`;
    return;
  }
  keepToken(candidate);
  $("token").value = "";
  showApp(me);
}

async function resume() {
  try {
    showApp(await api("GET", "/me"));
  } catch (err) {
    showLogin(err instanceof ApiError && err.status === 401
      ? `Logged out: the token was refused. ${err.message}` : `Cannot resume: ${err.message}`);
  }
}

function start() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => showLogin());
  for (const v of VIEWS) views[v].start();
  window.addEventListener("hashchange", route);
  if (token()) resume();
  else showLogin();
}

start();
