// Cron in words: a small pure describer for the common shapes of 5- and 6-field expressions and
// the @-macros. It never claims more than it knows: an expression it cannot phrase is shown as is.
const MACROS = {
  "@yearly": "every year on 1 January at 00:00", "@annually": "every year on 1 January at 00:00",
  "@monthly": "every month on day 1 at 00:00", "@weekly": "every Sunday at 00:00",
  "@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour at minute 0",
};
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS = ["", "January", "February", "March", "April", "May", "June", "July", "August", "September",
  "October", "November", "December"];

const num = (f) => /^\d+$/.test(f);
const pad = (n) => String(n).padStart(2, "0");

function list(field, names) {
  return field.split(",").map((part) => {
    const [a, b] = part.split("-");
    const name = (x) => (names && num(x) ? names[Number(x)] : x);
    return b !== undefined ? `${name(a)} to ${name(b)}` : name(a);
  }).join(", ");
}

export function describeCron(expr) {
  if (!expr) return "";
  const text = expr.trim();
  if (MACROS[text.toLowerCase()]) return MACROS[text.toLowerCase()];
  let fields = text.split(/\s+/);
  let seconds = null;
  if (fields.length === 6) [seconds, ...fields] = fields;
  if (fields.length !== 5) return text;
  const [min, hour, dom, mon, dow] = fields;
  let when;
  if (min === "*" && hour === "*") when = "every minute";
  else if (/^\*\/\d+$/.test(min) && hour === "*") when = `every ${min.slice(2)} minutes`;
  else if (num(min) && hour === "*") when = `every hour at minute ${Number(min)}`;
  else if (num(min) && /^\*\/\d+$/.test(hour)) when = `every ${hour.slice(2)} hours at minute ${Number(min)}`;
  else if (num(min) && num(hour)) when = `at ${pad(hour)}:${pad(min)}`;
  else if (num(min) && /^[\d,-]+$/.test(hour)) when = `at minute ${Number(min)} of hours ${list(hour)}`;
  else return text;
  if (seconds !== null && seconds !== "0") {
    if (seconds === "*") when = `every second, ${when}`;
    else if (/^\*\/\d+$/.test(seconds)) when = `every ${seconds.slice(2)} seconds, ${when}`;
    else return text;
  }
  // Day, month and weekday are phrased only as numbers, lists and ranges; anything else (L, W, #,
  // names, steps) is shown as written rather than guessed at.
  if (![dom, mon, dow].every((f) => f === "*" || /^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(f))) return text;
  const parts = [when];
  if (dom !== "*") parts.push(`on day ${list(dom)} of the month`);
  if (mon !== "*") parts.push(`in ${list(mon, MONTHS)}`);
  if (dow !== "*") parts.push(`on ${list(dow, DAYS)}`);
  else if (dom === "*" && mon === "*" && num(hour)) parts.push("every day");
  return parts.join(" ");
}
