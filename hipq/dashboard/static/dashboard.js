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
  if (body === undefined && el.dataset.body) body = JSON.parse(el.dataset.body);
  if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
  el.disabled = true;
  const result = await callApi(method, path, body);
  let done = el.dataset.done || "Done";
  // A bulk operation runs on in bounded steps: say which, GET /v1/jobs/bulk/{id} follows it.
  if (result.ok && result.data && result.data.action && result.data.id) {
    done += " (bulk operation " + result.data.id + ")";
  }
  flash(result.ok ? done : result.message, result.ok ? "ok" : "error");
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
