// The dashboard's actions: each button or form with data-action calls the public
// REST API ("METHOD /v1/path"), with the same authorization as any API client.
// A button with data-ids runs its call once per job id ({id} in the path) and asks
// for confirmation first; so does any button with data-confirm.
"use strict";

const ROOT = document.body.dataset.root || "";
const TOKEN_KEY = "hipq-token";
const BULK_PARALLEL = 8;

let pressing = false;  // a mouse button or finger is down: a click is under way

function live() {
  // No refresh while the operator types into a form on the refreshed part, or while a
  // click is under way (a swap between press and release would lose it).
  const toggle = document.getElementById("live-toggle");
  if (toggle && !toggle.checked) return false;
  return !pressing && !document.querySelector("#live form:focus-within");
}

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

async function startSession(form) {
  const token = form.elements.token.value.trim();
  const response = await fetch(form.dataset.session, {
    method: "POST",
    headers: { Authorization: "Bearer " + token },
  });
  if (response.status !== 204) {
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

async function runEach(method, template, ids) {
  const failures = [];
  let next = 0;
  async function worker() {
    while (next < ids.length) {
      const id = ids[next++];
      const result = await callApi(method, template.replace("{id}", encodeURIComponent(id)));
      if (!result.ok) failures.push("job " + id + ": " + result.message);
    }
  }
  await Promise.all(Array.from({ length: Math.min(BULK_PARALLEL, ids.length) }, worker));
  return failures;
}

function formBody(form) {
  const body = {};
  for (const input of form.querySelectorAll("input[name], select[name], textarea[name]")) {
    if (input.value === "") continue;
    const kind = input.dataset.kind;
    if (kind === "int") {
      const n = Number(input.value);
      if (!Number.isInteger(n)) throw new Error(input.name + ": " + JSON.stringify(input.value) + " is not a whole number");
      body[input.name] = n;
    } else if (kind === "instant") {
      // datetime-local has no zone: the page says it is UTC.
      body[input.name] = input.value.length === 16 ? input.value + ":00Z" : input.value + "Z";
    } else {
      body[input.name] = input.value;
    }
  }
  return body;
}

async function act(el, body) {
  const [method, path] = el.dataset.action.split(" ");
  const ids = el.dataset.ids ? JSON.parse(el.dataset.ids) : null;
  if (ids) {
    if (ids.length > 1 && !window.confirm(el.dataset.confirm || ("Run this on " + ids.length + " jobs?"))) return;
    el.disabled = true;
    flash("Working on " + ids.length + " jobs…", "busy");
    const failures = await runEach(method, path, ids);
    const done = ids.length - failures.length;
    flash((el.dataset.done || "Done") + ": " + done + " of " + ids.length + " jobs" +
      (failures.length ? "; refused: " + failures.slice(0, 5).join("; ") : ""), failures.length ? "error" : "ok");
  } else {
    if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
    el.disabled = true;
    const result = await callApi(method, path, body);
    flash(result.ok ? (el.dataset.done || "Done") : result.message, result.ok ? "ok" : "error");
  }
  el.disabled = false;
  refresh();
}

document.addEventListener("click", (event) => {
  if (event.target.id === "sign-out") {
    event.preventDefault();
    endSession(event.target);
    return;
  }
  const el = event.target.closest("button[data-action]");
  if (!el) return;
  event.preventDefault();
  act(el, undefined);
});

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
