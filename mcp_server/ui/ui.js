// trimem ui: swaps server-rendered fragments into the page; every write sends the page's token.
"use strict";

const token = document.querySelector('meta[name="trimem-token"]').content;
const controls = document.getElementById("controls");
const results = document.getElementById("results");
const detail = document.getElementById("detail");
const message = document.getElementById("message");
let offset = 0;
let chosen = null;
let latest = 0;

function scopeParams() {
  const params = new URLSearchParams();
  for (const name of ["user_id", "agent_id", "run_id"]) {
    if (controls.elements[name].value) params.set(name, controls.elements[name].value);
  }
  return params;
}

function say(text, ok = false) {
  message.textContent = text;
  message.className = ok ? "ok" : "";
  message.hidden = !text;
}

// Bars carry their shares as data; the content policy allows no inline style attributes.
function drawBars(root) {
  for (const seg of root.querySelectorAll("[data-share]")) seg.style.width = (100 * seg.dataset.share) + "%";
  for (const gate of root.querySelectorAll("[data-left]")) gate.style.left = (100 * gate.dataset.left) + "%";
}

// A box as tall as what it holds, so a JSON object shows every line.
function fit(box) {
  box.style.height = "auto";
  box.style.height = box.scrollHeight + box.offsetHeight - box.clientHeight + "px";
}

// On a narrow screen the editor is drawn below the whole list: bring it to where the person looks,
// unless it already shows whole (an editor whose top peeks above the bottom edge is not in view).
function reveal(element) {
  const box = element.getBoundingClientRect();
  if (box.top < 0 || box.bottom > window.innerHeight) element.scrollIntoView({block: "start"});
}

async function fetchText(url, options = {}) {
  const response = await fetch(url, options);
  const text = await response.text();
  if (!response.ok) throw new Error(text);
  return text;
}

// Whether the fragment was drawn (an error is said in the message line instead).
async function show(target, url) {
  const ticket = ++latest;
  try {
    const html = await fetchText(url);
    if (ticket !== latest && target === results) return false;  // a newer request already answered
    // A re-rank keeps the query analysis open if it was: that is what the person is watching.
    const wasOpen = target.querySelector("details.analysis")?.open;
    target.innerHTML = html;
    const analysis = target.querySelector("details.analysis");
    if (analysis && wasOpen) analysis.open = true;
    drawBars(target);
    for (const box of target.querySelectorAll("textarea")) fit(box);
    say("");
    return true;
  } catch (error) {
    say(error.message);
    return false;
  }
}

function refresh() {
  const params = scopeParams();
  const filters = controls.elements.filters.value.trim();
  if (filters) params.set("filters", filters);
  const query = controls.elements.q.value.trim();
  if (query) {
    params.set("q", query);
    // The gate at its default is no choice of the person's: the query is then judged for relevance.
    const gate = controls.elements.threshold;
    if (gate.value !== gate.defaultValue) params.set("threshold", gate.value);
    params.set("bm25", controls.elements.bm25.checked ? "1" : "0");
    params.set("entities", controls.elements.entities.checked ? "1" : "0");
    return show(results, "/search?" + params);
  }
  params.set("offset", offset);
  return show(results, "/memories?" + params);
}

// A memory's address: its id goes in the query string, where any character it holds is data.
function memoryUrl(id) {
  const params = scopeParams();
  params.set("id", id);
  return "/memory?" + params;
}

async function openDetail(id) {
  chosen = id;
  for (const item of results.querySelectorAll("li.memory")) item.classList.toggle("chosen", item.dataset.id === id);
  if (await show(detail, memoryUrl(id))) reveal(detail);
}

async function write(method, id, body) {
  return fetchText(memoryUrl(id), {
    method,
    headers: {"Content-Type": "application/json", "X-Trimem-Token": token},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

let pending = null;
function soon() {
  clearTimeout(pending);
  pending = setTimeout(() => { offset = 0; refresh(); }, 200);
}

controls.addEventListener("submit", (event) => { event.preventDefault(); offset = 0; refresh(); });
controls.addEventListener("input", (event) => {
  if (event.target.name === "threshold") controls.elements.threshold_shown.value = event.target.value;
  if (event.target.tagName !== "SELECT") soon();
});
controls.addEventListener("change", (event) => {
  const name = event.target.name;
  if (name === "user_id") {
    location.search = "?" + new URLSearchParams({user_id: event.target.value});  // agents and runs are per user
  } else if (name === "agent_id" || name === "run_id" || name === "bm25" || name === "entities") {
    offset = 0;
    refresh();
  }
});

// The download asks for what the pickers and the filter box show, when it is clicked.
document.getElementById("export").addEventListener("click", (event) => {
  const params = scopeParams();
  const filters = controls.elements.filters.value.trim();
  if (filters) params.set("filters", filters);
  event.currentTarget.href = "/export?" + params;
});

results.addEventListener("click", (event) => {
  const page = event.target.closest("button.page");
  if (page) { offset = Number(page.dataset.offset); refresh(); return; }
  if (event.target.closest("a.why")) {  // nothing relevant: open the explanation, with what was withheld
    const explanation = document.getElementById("explanation");
    if (explanation) explanation.open = true;
    return;
  }
  if (event.target.closest("details")) return;
  const item = event.target.closest("li.memory");
  if (item) openDetail(item.dataset.id);
});

detail.addEventListener("click", async (event) => {
  const chip = event.target.closest("button.chip");
  if (chip) {
    const params = scopeParams();
    params.set("name", chip.dataset.entity);
    show(results, "/entity?" + params);
    return;
  }
  if (event.target.id === "delete") {
    const form = document.getElementById("edit");
    if (!confirm("Delete this memory? Its history keeps a record, and `trimem restore` can bring it back.")) return;
    try {
      await write("DELETE", form.dataset.id);
      detail.innerHTML = '<p class="empty">Deleted.</p>';
      say("Memory deleted.", true);
      refresh();
    } catch (error) {
      say(error.message);
    }
  }
});

detail.addEventListener("input", (event) => {
  if (event.target.tagName === "TEXTAREA") fit(event.target);
});

detail.addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    await write("POST", form.dataset.id, {text: form.elements.text.value, metadata: form.elements.metadata.value});
    await refresh();
    await openDetail(form.dataset.id);
    say("Saved.", true);
  } catch (error) {
    say(error.message);
  }
});

drawBars(results);
