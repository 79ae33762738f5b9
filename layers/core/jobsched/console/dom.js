// Tiny DOM helpers: every node is built with textContent, never innerHTML, so no API value
// (a job name, an error message, a log line) can become markup.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function badge(status) {
  return h("span", { class: `badge s-${status || "NONE"}` }, status || "none");
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

export function countdown(iso) {
  // A <time> element the app's one-second ticker refreshes (see app.js tickCountdowns).
  if (!iso) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: iso, "data-countdown": iso, title: when(iso) }, relative(iso));
}

export function relative(iso) {
  const ms = new Date(iso) - Date.now();
  const abs = Math.abs(ms);
  const unit = abs < 60e3 ? [1e3, "s"] : abs < 3600e3 ? [60e3, "min"] : abs < 86400e3 ? [3600e3, "h"] : [86400e3, "d"];
  const n = Math.round(abs / unit[0]);
  return ms >= 0 ? `in ${n} ${unit[1]}` : `${n} ${unit[1]} ago`;
}

export function ms(value) {
  if (value === null || value === undefined) return "—";
  return value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(1)} s`;
}

let toastTimer;
export function toast(message) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.classList.add("show");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove("show"), 3000);
}
