// The Store view: the buckets with their key counts, a key browser and one key's value.
//
// Theory of operation
// - Nothing reads the whole keyspace: the buckets come from the server's INFO keyspace (counts
//   only), and the browser shows one page of `GET /store/keys` at a time, a bounded SCAN with
//   the server's own cursor. The cursors only go forward, so the view keeps the cursors of the
//   pages it came through on a stack and goes back by popping it (as the task list does).
// - A key is named as the API shows it: its text, or its hex with `encoding=hex` when it is
//   not UTF-8 (shown as 0x… and marked binary). A value is shown as text or as a hex dump
//   with its length; a value longer than the preview is cut, with a Download button that
//   fetches the whole value with the token.
// - Operators (and only they: the API answers 403 to anyone else) may set a value, set or
//   remove a TTL and delete a key; each change asks for a confirmation first, in the page.
//   Users never see those controls.
// - The view polls nothing by itself: buckets load when it is opened (and on Refresh), keys
//   and values when asked for.

import { api, download, query } from "./api.js";
import { $, bytes, confirmIn, duration, el } from "./dom.js";

const HEX_ROW = 16; // bytes per line of a hex dump

function keyLabel(item) {
  return item.encoding === "hex" ? `0x${item.key}` : item.key;
}

function ttlText(ms) {
  if (ms === null || ms === undefined) return "none";
  return ms < 1000 ? `${ms} ms` : duration(ms / 1000);
}

// "00000010  48 65 6c 6c 6f …  |Hello…|", HEX_ROW bytes a line.
function hexDump(hex) {
  const lines = [];
  for (let at = 0; at < hex.length / 2; at += HEX_ROW) {
    const row = [];
    let text = "";
    for (let i = at; i < Math.min(at + HEX_ROW, hex.length / 2); i += 1) {
      const pair = hex.slice(2 * i, 2 * i + 2);
      const code = parseInt(pair, 16);
      row.push(pair);
      text += code >= 0x20 && code < 0x7f ? String.fromCharCode(code) : ".";
    }
    lines.push(`${at.toString(16).padStart(8, "0")}  ${row.join(" ").padEnd(HEX_ROW * 3 - 1)}  |${text}|`);
  }
  return lines.join("\n");
}

export function createStoreView(session) {
  const view = {
    bucket: null, // the bucket being browsed
    pattern: "*",
    cursors: ["0"], // the server cursor of every page from the first to the one on screen
    next: "0", // the cursor after the page on screen ("0": the scan is done)
    key: null, // {bucket, key, encoding} of the open value
    loaded: false,
  };

  function operator() {
    return session.role() === "operator";
  }

  function showOperatorControls() {
    for (const node of document.querySelectorAll("#view-store .operator-only")) {
      node.hidden = !operator();
    }
  }

  // --- buckets --------------------------------------------------------------------------------

  async function loadBuckets() {
    $("buckets-error").textContent = "";
    try {
      const listing = await api("GET", "/store/buckets");
      $("bucket-rows").replaceChildren(...listing.buckets.map((b) => {
        const tr = el("tr", null, { class: "bucket", "data-bucket": b.name });
        const open = el("a", b.name, { href: "#store", class: "name" });
        open.addEventListener("click", (event) => {
          event.preventDefault();
          browse(b.name, "*");
        });
        const first = el("td");
        first.append(open);
        tr.append(first, el("td", b.keys, { class: "num" }), el("td", b.expires, { class: "num" }));
        return tr;
      }));
      $("bucket-names").replaceChildren(...listing.buckets.map((b) => el("option", null,
                                                                        { value: b.name })));
      $("no-buckets").hidden = listing.buckets.length > 0;
      $("buckets-more").hidden = !listing.truncated;
    } catch (err) {
      if (!session.handleAuth(err)) $("buckets-error").textContent = err.message;
    }
  }

  // --- keys -----------------------------------------------------------------------------------

  function browse(bucket, pattern) {
    view.bucket = bucket;
    view.pattern = pattern || "*";
    view.cursors = ["0"];
    $("scan-bucket").value = bucket;
    $("scan-pattern").value = view.pattern;
    loadKeys();
  }

  async function loadKeys() {
    if (!view.bucket) return;
    $("keys-error").textContent = "";
    $("keys-bucket").textContent = view.bucket;
    const cursor = view.cursors[view.cursors.length - 1];
    try {
      const page = await api("GET", `/store/keys?${query({
        bucket: view.bucket, pattern: view.pattern, cursor, count: $("scan-count").value,
      })}`);
      renderKeys(page);
    } catch (err) {
      if (session.handleAuth(err)) return;
      $("key-rows").replaceChildren();
      view.next = "0";
      $("keys-error").textContent = err.message;
      updatePager(0);
    }
  }

  function renderKeys(page) {
    $("key-rows").replaceChildren(...page.keys.map((item) => {
      const tr = el("tr", null, { class: "key", "data-key": item.key,
                                  "data-encoding": item.encoding });
      const open = el("a", keyLabel(item), { href: "#store", class: "name" });
      if (item.encoding === "hex") open.classList.add("binary");
      open.addEventListener("click", (event) => {
        event.preventDefault();
        openKey({ bucket: page.bucket, key: item.key, encoding: item.encoding });
      });
      const first = el("td");
      first.append(open);
      tr.append(first, el("td", item.type), el("td", bytes(item.size), { class: "num" }),
                el("td", ttlText(item.ttl_ms)));
      return tr;
    }));
    view.next = page.cursor;
    updatePager(page.keys.length);
  }

  function updatePager(shown) {
    $("no-keys").hidden = shown > 0 || !view.bucket;
    $("keys-next").disabled = view.next === "0";
    $("keys-prev").disabled = view.cursors.length < 2;
    $("keys-page").textContent = `page ${view.cursors.length}`;
  }

  // --- one key --------------------------------------------------------------------------------

  function keyQuery(k) {
    return query({ bucket: k.bucket, key: k.key, encoding: k.encoding });
  }

  async function openKey(k) {
    view.key = k;
    $("key-detail").hidden = false;
    $("key-status").textContent = "";
    $("key-error").textContent = "";
    $("confirm").hidden = true;
    $("set-value").value = "";
    $("set-ttl").value = "";
    try {
      renderKey(await api("GET", `/store/key?${keyQuery(k)}`));
    } catch (err) {
      if (session.handleAuth(err)) return;
      $("key-error").textContent = err.message;
      $("key-fields").replaceChildren();
      $("value-view").textContent = "";
    }
  }

  function renderKey(detail) {
    const label = keyLabel(detail);
    $("key-detail").dataset.key = detail.key;
    $("key-detail").dataset.encoding = detail.encoding;
    $("key-title").textContent = label;
    const dl = $("key-fields");
    dl.replaceChildren();
    const field = (name, value) => dl.append(el("dt", name), el("dd", value ?? "",
                                                                { "data-field": name }));
    field("bucket", detail.bucket);
    field("key", detail.encoding === "hex" ? `${label} (binary, not UTF-8)` : label);
    field("type", detail.type);
    field("size", detail.size === null ? "" : `${detail.size} bytes`);
    field("ttl", ttlText(detail.ttl_ms));
    const value = detail.value;
    const view_ = $("value-view");
    view_.classList.toggle("hex", Boolean(value && value.encoding === "hex"));
    if (!value) {
      view_.textContent = "";
      $("value-note").textContent = `a ${detail.type} has no single value to show`;
    } else {
      const binary = value.encoding === "hex";
      view_.textContent = binary ? hexDump(value.data) : value.data;
      const kind = binary ? `binary, ${value.length} bytes, shown as hex`
        : `text, ${value.length} bytes`;
      $("value-note").textContent = value.truncated
        ? `${kind}; only the beginning is shown: download the whole value` : kind;
    }
    view_.dataset.encoding = value ? value.encoding : "";
    $("value-download").hidden = !value;
    showOperatorControls();
  }

  async function downloadValue() {
    const k = view.key;
    $("key-error").textContent = "";
    try {
      const name = k.encoding === "hex" ? "value.bin" : k.key.replace(/[^A-Za-z0-9._-]+/g, "_");
      await download(`/store/value?${keyQuery(k)}`, name || "value.bin");
    } catch (err) {
      if (!session.handleAuth(err)) $("key-error").textContent = err.message;
    }
  }

  // Ask, then run `change` (an API call answering the key as it is now); show the outcome.
  async function change(question, done, call) {
    $("key-status").textContent = "";
    $("key-error").textContent = "";
    if (!(await confirmIn($("confirm"), question))) {
      $("key-status").textContent = "not changed";
      return;
    }
    try {
      const detail = await call();
      $("key-status").textContent = done;
      if (detail) renderKey(detail);
      loadKeys();
      loadBuckets();
    } catch (err) {
      if (!session.handleAuth(err)) $("key-error").textContent = err.message;
    }
  }

  function setValue(event) {
    event.preventDefault();
    const k = view.key;
    const value = $("set-value").value;
    change(`Set the value of ${keyLabel(k)} in ${k.bucket} to ${value.length} characters?`,
           "value set", () => api("PUT", `/store/key?${keyQuery(k)}`, {
             body: value, headers: { "Content-Type": "application/octet-stream" } }));
  }

  function setTtl(event) {
    event.preventDefault();
    const k = view.key;
    const text = $("set-ttl").value.trim();
    const seconds = text === "" ? null : Number(text);
    const question = seconds === null ? `Remove the TTL of ${keyLabel(k)} (keep it forever)?`
      : `Expire ${keyLabel(k)} in ${seconds} s?`;
    change(question, seconds === null ? "TTL removed" : "TTL set",
           () => api("PUT", `/store/ttl?${keyQuery(k)}`, { json: { seconds } }));
  }

  async function deleteKey() {
    const k = view.key;
    await change(`Delete ${keyLabel(k)} from ${k.bucket}? This cannot be undone.`, "deleted",
                 () => api("DELETE", `/store/key?${keyQuery(k)}`));
    if ($("key-status").textContent === "deleted") {
      $("key-fields").replaceChildren();
      $("value-view").textContent = "";
      $("value-note").textContent = "";
      $("value-download").hidden = true;
      $("key-actions").hidden = true;
    }
  }

  function newKey(event) {
    event.preventDefault();
    const bucket = $("new-key-bucket").value.trim();
    const key = $("new-key-name").value;
    const value = $("new-key-value").value;
    const k = { bucket, key, encoding: "utf-8" };
    $("new-key-status").textContent = "";
    confirmIn($("new-key-confirm"), `Set ${key} in ${bucket} to ${value.length} characters?`)
      .then(async (yes) => {
        if (!yes) return;
        try {
          await api("PUT", `/store/key?${keyQuery(k)}`, {
            body: value, headers: { "Content-Type": "application/octet-stream" } });
          $("new-key-status").textContent = "saved";
          $("new-key-form").reset();
          loadBuckets();
          if (view.bucket === bucket) loadKeys();
          openKey(k);
        } catch (err) {
          if (!session.handleAuth(err)) $("new-key-status").textContent = err.message;
        }
      });
  }

  function start() {
    $("buckets-refresh").addEventListener("click", loadBuckets);
    $("scan-form").addEventListener("submit", (event) => {
      event.preventDefault();
      browse($("scan-bucket").value.trim(), $("scan-pattern").value);
    });
    $("keys-next").addEventListener("click", () => {
      if (view.next !== "0") view.cursors.push(view.next);
      loadKeys();
    });
    $("keys-prev").addEventListener("click", () => {
      if (view.cursors.length > 1) view.cursors.pop();
      loadKeys();
    });
    $("key-close").addEventListener("click", () => {
      view.key = null;
      $("key-detail").hidden = true;
    });
    $("value-download").addEventListener("click", downloadValue);
    $("set-value-form").addEventListener("submit", setValue);
    $("set-ttl-form").addEventListener("submit", setTtl);
    $("delete-key").addEventListener("click", deleteKey);
    $("new-key-form").addEventListener("submit", newKey);
  }

  function show() {
    showOperatorControls();
    if (!view.loaded) {
      view.loaded = true;
      loadBuckets();
    }
  }

  function hide() {}

  function reset() {
    view.bucket = null;
    view.key = null;
    view.loaded = false;
    view.cursors = ["0"];
    view.next = "0";
    $("bucket-rows").replaceChildren();
    $("key-rows").replaceChildren();
    $("key-detail").hidden = true;
    $("keys-bucket").textContent = "";
    updatePager(0);
  }

  return { start, show, hide, reset, loadBuckets };
}
