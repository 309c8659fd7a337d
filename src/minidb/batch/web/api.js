// The page's one way to the control API (docs/batch-api.md): the token, calls, downloads.
//
// The token lives in sessionStorage (this tab's session, gone when it closes) and goes out as
// `Authorization: Bearer` on every call. Errors are problem+json (RFC 9457): an ApiError
// carries the status and the API's `detail`, so the page shows what the API said.

const TOKEN_KEY = "minidb.batch.token";

export class ApiError extends Error {
  constructor(status, detail, code = null) {
    super(detail);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function keepToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

async function call(method, path, { json, body, headers = {}, auth = token() } = {}) {
  const init = { method, headers: { ...headers, Authorization: `Bearer ${auth}` } };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  try {
    return await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, `the server cannot be reached (${err.message})`);
  }
}

async function refusal(response) {
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json().catch(() => null) : null;
  const detail = (data && (data.detail || data.title)) || response.statusText;
  return new ApiError(response.status, `${detail} (HTTP ${response.status})`,
                      (data && data.code) || null);
}

// One call; resolves to the parsed JSON (or null for 204), throws ApiError with the
// problem+json `detail` or the status text.
export async function api(method, path, options = {}) {
  const response = await call(method, path, options);
  if (!response.ok) throw await refusal(response);
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json().catch(() => null) : null;
}

// Fetch `path` with the token and hand it to the browser as a file download named `name`
// (a plain link cannot carry the Authorization header).
export async function download(path, name) {
  const response = await call("GET", path);
  if (!response.ok) throw await refusal(response);
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// Query strings built from parts, so a key or pattern is always percent-encoded whole.
export function query(params) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") q.set(name, String(value));
  }
  return q.toString();
}
