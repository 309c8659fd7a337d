// Small DOM helpers of the page. Data never becomes markup: every value reaches the DOM
// through textContent or an attribute (keys, values and task names come from users).

export const $ = (id) => document.getElementById(id);

export function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

// A button that is disabled while its action runs (no double retry from a double click).
export function button(text, action, onClick) {
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

export function age(iso, now = Date.now()) {
  const s = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  return duration(s);
}

export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function safeHref(url) {
  try {
    const parsed = new URL(url, location.href);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

// Ask in `box` (an element with a text paragraph and Confirm/Cancel buttons) before a change;
// resolves true on Confirm, false on Cancel or when another question replaces this one.
export function confirmIn(box, question) {
  const [text, yes, no] = [box.querySelector("p"), box.querySelector("[data-confirm=yes]"),
                           box.querySelector("[data-confirm=no]")];
  if (box.pending) box.pending(false);
  text.textContent = question;
  box.hidden = false;
  yes.focus();
  return new Promise((resolve) => {
    const done = (answer) => {
      box.hidden = true;
      box.pending = null;
      yes.removeEventListener("click", onYes);
      no.removeEventListener("click", onNo);
      resolve(answer);
    };
    const onYes = () => done(true);
    const onNo = () => done(false);
    box.pending = done;
    yes.addEventListener("click", onYes);
    no.addEventListener("click", onNo);
  });
}
