// The console's entry point: the admin token (kept in this page's memory only), the calls
// to the gateway (this origin only), and the two views.
import { Live } from "./live.js";
import { TryIt } from "./try.js";

let token = "";

// api calls the gateway that served this page; the admin token goes only to the calls that
// use it (the snapshot, to be shown the reasons; the repository API).
const api = {
  async json(path, opts = {}) {
    const headers = { Accept: "application/json" };
    if (opts.auth && token) headers.Authorization = "Bearer " + token;
    const res = await fetch(path, { headers, cache: "no-store" });
    if (!res.ok) {
      let msg = res.statusText;
      try { msg = (await res.json()).error || msg; } catch { /* not JSON */ }
      throw new Error(res.status + " " + msg);
    }
    return res.json();
  },
  post(path) {
    const headers = {};
    if (token) headers.Authorization = "Bearer " + token;
    return fetch(path, { method: "POST", headers });
  },
};

const tryIt = new TryIt(api);
const tokenState = document.getElementById("token-state");
let lastAuthorized = null;

const live = new Live(api, snap => {
  tryIt.setModels(snap.models);
  if (token && lastAuthorized !== snap.authorized) {
    tokenState.textContent = snap.authorized ? "token accepted" : "the gateway does not accept this token";
    tokenState.className = snap.authorized ? "ok" : "bad";
  }
  lastAuthorized = token ? snap.authorized : null;
  if (!token) tokenState.textContent = snap.repository === "open" ? "this listener needs no token" : "";
});

document.getElementById("token-form").addEventListener("submit", e => {
  e.preventDefault();
  token = document.getElementById("token").value.trim();
  lastAuthorized = null;
  tokenState.textContent = token ? "checking…" : "";
  live.stop();
  live.start();
});
document.getElementById("token-clear").addEventListener("click", () => {
  token = "";
  document.getElementById("token").value = "";
  tokenState.textContent = "forgotten";
  live.stop();
  live.start();
});

live.start();
