// The dashboard's actions: each button or form with data-action calls the public
// REST API ("METHOD /v1/path", the JSON body from data-body or the form's fields),
// with the same authorization as any API client. A button with data-confirm asks
// first (every action on more than one job has one).
"use strict";

const ROOT = document.body.dataset.root || "";
const TOKEN_KEY = "hipq-token";

let pressing = false;  // a mouse button or finger is down: a click is under way

function live() {
  // No refresh while the operator types into a form on the refreshed part, or while a
  // click is under way (a swap between press and release would lose it).
  const toggle = document.getElementById("live-toggle");
  if (toggle && !toggle.checked) return false;
  // Nor while jobs are selected in the job list: a refresh would clear the selection.
  // Nor while an editor is open on it (a refresh would close it).
  return !pressing && !document.querySelector("#live form:focus-within, #live details[open]") &&
    selectedJobs().length === 0;
}

function selectedJobs() {
  return Array.from(document.querySelectorAll("#live input[name=select-job]:checked"), (x) => Number(x.value));
}

function showSelection() {
  const count = document.getElementById("selected-count");
  if (!count) return;
  const n = selectedJobs().length;
  count.textContent = n ? n + " selected" : "none selected";
  const all = document.getElementById("select-page");
  const boxes = document.querySelectorAll("#live input[name=select-job]");
  if (all) all.checked = boxes.length > 0 && n === boxes.length;
}

document.addEventListener("change", (event) => {
  if (event.target.id === "select-page") {
    for (const box of document.querySelectorAll("#live input[name=select-job]")) box.checked = event.target.checked;
  }
  if (event.target.id === "select-page" || event.target.name === "select-job") showSelection();
});
document.addEventListener("htmx:afterSwap", showSelection);

document.addEventListener("pointerdown", () => { pressing = true; }, true);
document.addEventListener("pointerup", () => { setTimeout(() => { pressing = false; }, 0); }, true);
document.addEventListener("pointercancel", () => { pressing = false; }, true);

// The periodic refresh (hx-trigger="every 5s") skips its turn unless live(), and a
// refresh that comes back while the operator started something is not swapped in. (A
// trigger filter would need eval, which the pages' Content-Security-Policy forbids.)
document.addEventListener("htmx:confirm", (event) => {
  if (event.detail.elt.id === "live" && !live()) event.preventDefault();
});
document.addEventListener("htmx:beforeSwap", (event) => {
  if (event.detail.elt.id === "live" && !live()) event.detail.shouldSwap = false;
});

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

document.addEventListener("htmx:configRequest", (event) => {
  Object.assign(event.detail.headers, authHeaders());
});

function flash(message, kind) {
  const box = document.getElementById("flash");
  box.textContent = message;
  box.className = kind || "ok";
}

async function callApi(method, path, body) {
  const init = { method, headers: { Accept: "application/json", ...authHeaders() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(ROOT + path, init);
  } catch (err) {
    return { ok: false, message: "hipq did not answer: " + err };
  }
  let data = null;
  try { data = await response.json(); } catch (err) { data = null; }
  if (response.ok) return { ok: true, data };
  if (response.status === 401) signIn();
  const detail = data && (data.message || data.error) ? (data.message || data.error) : response.statusText;
  return { ok: false, message: response.status + " " + detail };
}

function signIn() {
  // The tab has no valid token (a new tab, or the token was rotated): ask for one.
  sessionStorage.removeItem(TOKEN_KEY);
  const here = window.location.pathname + window.location.search;
  window.location.assign(document.body.dataset.login + "?next=" + encodeURIComponent(here));
}

async function startSession(form, remembered) {
  const token = remembered || form.elements.token.value.trim();
  const response = await fetch(form.dataset.session, {
    method: "POST",
    headers: { Authorization: "Bearer " + token },
  });
  if (response.status !== 204) {
    if (remembered) sessionStorage.removeItem(TOKEN_KEY);  // rotated: ask for one
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).message || message; } catch (err) { /* not JSON */ }
    flash(message, "error");
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  window.location.assign(form.dataset.next);
}

async function endSession(button) {
  sessionStorage.removeItem(TOKEN_KEY);
  await fetch(button.dataset.login.replace(/\/login$/, "/session"), { method: "DELETE" });
  window.location.assign(button.dataset.login);
}

function refresh() {
  const live = document.getElementById("live");
  if (live && window.htmx) {
    htmx.ajax("GET", window.location.href, { target: "#live", select: "#live", swap: "outerHTML" });
  } else {
    window.location.reload();
  }
}

function formValue(input) {
  // A checkbox says true or false, so that unticking it in an editor is sent too.
  if (input.type === "checkbox") return input.checked;
  const kind = input.dataset.kind;
  if (kind === "int") {
    const n = Number(input.value);
    if (!Number.isInteger(n)) throw new Error(input.name + ": " + JSON.stringify(input.value) + " is not a whole number");
    return n;
  }
  if (kind === "instant") {
    // datetime-local has no zone: the page says it is UTC.
    return input.value.length === 16 ? input.value + ":00Z" : input.value + "Z";
  }
  if (kind === "json") {
    try { return JSON.parse(input.value); } catch (err) { throw new Error(input.name + ": not JSON (" + err.message + ")"); }
  }
  return input.value;
}

function formBody(form) {
  // Each field by its name; a dotted name ("job.type") is a field of an object.
  const body = {};
  for (const input of form.querySelectorAll("input[name], select[name], textarea[name]")) {
    if (input.type !== "checkbox" && input.value.trim() === "") continue;
    const path = input.name.split(".");
    let into = body;
    for (const key of path.slice(0, -1)) into = (into[key] = into[key] || {});
    into[path[path.length - 1]] = formValue(input);
  }
  return body;
}

async function act(el, body, done) {
  const [method, path] = el.dataset.action.split(" ");
  if (body === undefined && el.dataset.body) body = JSON.parse(el.dataset.body);
  if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
  el.disabled = true;
  const result = await callApi(method, path, body);
  done = done || el.dataset.done || "Done";
  // A bulk operation runs on in bounded steps: say which, GET /v1/jobs/bulk/{id} follows it.
  if (result.ok && result.data && result.data.action && result.data.id) {
    done += " (bulk operation " + result.data.id + ")";
  }
  flash(result.ok ? done : result.message, result.ok ? "ok" : "error");
  el.disabled = false;
  // An action after which the page shows nothing (a deleted job): go where it says.
  if (result.ok && el.dataset.then) { window.location.assign(el.dataset.then); return; }
  // A form that did its work closes (an open editor holds the page's refresh back).
  const editor = el.closest("details");
  if (result.ok && editor) {
    editor.open = false;
    if (el.tagName === "FORM") el.reset();
  }
  refresh();
}

async function actOnSelected(el) {
  // The jobs ticked in the list, through the bulk API's id filter.
  const ids = selectedJobs();
  if (ids.length === 0) { flash("Select jobs first (the boxes in the list)", "error"); return; }
  const jobs = ids.length + " selected job" + (ids.length === 1 ? "" : "s");
  if (!window.confirm(el.dataset.verb + " " + jobs + "?")) return;
  el.dataset.action = "POST /v1/jobs/bulk";
  for (const box of document.querySelectorAll("#live input[name=select-job]:checked")) box.checked = false;
  showSelection();
  await act(el, { action: el.dataset.selected, filter: { ids } }, el.dataset.verb + " of " + jobs + " started");
}

async function actOnFilter(el) {
  // Every job the list's filter matches: count them first (a dry run), then ask.
  const body = JSON.parse(el.dataset.body);
  const counted = await callApi("POST", "/v1/jobs/bulk", { ...body, dry_run: true });
  if (!counted.ok) { flash(counted.message, "error"); return; }
  const n = counted.data.matched;
  if (n === 0) { flash("No job matches this filter", "error"); return; }
  if (!window.confirm(el.dataset.count.replace("{jobs}", n + (n === 1 ? " job" : " jobs")))) return;
  await act(el, body);
}

document.addEventListener("click", (event) => {
  if (event.target.id === "sign-out") {
    event.preventDefault();
    endSession(event.target);
    return;
  }
  const selected = event.target.closest("button[data-selected]");
  if (selected) { event.preventDefault(); actOnSelected(selected); return; }
  const all = event.target.closest("button[data-count]");
  if (all) { event.preventDefault(); actOnFilter(all); return; }
  const el = event.target.closest("button[data-action]");
  if (!el) return;
  event.preventDefault();
  act(el, undefined);
});

// The sign-in page in a tab that holds its token: the server's session ended (it
// expired, or another hipq process answers), not the tab's. A new one, at once.
(() => {
  const form = document.getElementById("sign-in");
  const remembered = sessionStorage.getItem(TOKEN_KEY);
  if (form && remembered) startSession(form, remembered);
})();

document.addEventListener("submit", (event) => {
  if (event.target.id === "sign-in") {
    event.preventDefault();
    startSession(event.target);
    return;
  }
  const form = event.target.closest("form[data-action]");
  if (!form) return;
  event.preventDefault();
  let body;
  try { body = formBody(form); } catch (err) { flash(err.message, "error"); return; }
  if (document.activeElement) document.activeElement.blur();
  act(form, body);
});
