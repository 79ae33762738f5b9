// The console's only way out: fetch() to the same origin's /api, with the chosen tenant's header.
// Locally the stack reads X-Tenant; behind `jobsched console --api URL` the proxy signs each call
// with the operator's AWS credentials, so the browser never holds a key.
const TENANT_KEY = "jobsched.tenant";

export function tenant() {
  return localStorage.getItem(TENANT_KEY) || "default";
}

export function setTenant(value) {
  localStorage.setItem(TENANT_KEY, value.trim() || "default");
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(method, path, body, headers = {}) {
  const init = { method, headers: { "X-Tenant": tenant(), ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(response.status, err.code || "http_" + response.status, err.message || text || response.statusText);
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body, headers) => api("POST", path, body, headers);
export const del = (path) => api("DELETE", path);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const text = q.toString();
  return text ? "?" + text : "";
}
