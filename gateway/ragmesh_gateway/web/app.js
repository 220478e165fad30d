// ragmesh web page: ask or search a collection, stream answers with their sources, keep the conversation,
// list collections and upload files. Plain JavaScript against the REST API, served by the gateway.
"use strict";

const KEY_STORAGE = "ragmesh.apiKey";
const SESSION_STORAGE = "ragmesh.session";
const COLLECTION_STORAGE = "ragmesh.collection";
const CITATION = /\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]/g;

const state = {
  collection: localStorage.getItem(COLLECTION_STORAGE) || "default",
  sessionId: localStorage.getItem(SESSION_STORAGE) || "",
  busy: false,
  turns: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

// --- the API ------------------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, error) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.reason = error.reason || `HTTP_${status}`;
  }
}

function headers(extra = {}) {
  const key = localStorage.getItem(KEY_STORAGE);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function apiError(response) {
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    // not JSON: a proxy's page
  }
  return new ApiError(response.status, (body && body.error) || { message: response.statusText });
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

// Server-Sent Events from a fetch response (EventSource can neither POST nor send the key).
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let carry = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const raw = carry + value;
    carry = raw.endsWith("\r") ? "\r" : ""; // a CRLF may be split across reads
    buffer += (carry ? raw.slice(0, -1) : raw).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}

// --- errors and the key -------------------------------------------------------------------------------------
function showError(error) {
  const box = $("error");
  box.replaceChildren(el("span", { class: "reason", text: error.reason || "ERROR" }),
    el("span", { text: error.message }));
  box.hidden = false;
  if (error.status === 401) openKeyDialog();
}

function clearError() {
  $("error").hidden = true;
}

function openKeyDialog() {
  const dialog = $("key-dialog");
  if (dialog.open) return;
  $("key-input").value = localStorage.getItem(KEY_STORAGE) || "";
  dialog.showModal();
  $("key-input").focus();
}

function showKeyState() {
  $("key-button").classList.toggle("has-key", Boolean(localStorage.getItem(KEY_STORAGE)));
}

// --- collections and uploads --------------------------------------------------------------------------------
function selectCollection(name) {
  state.collection = name;
  localStorage.setItem(COLLECTION_STORAGE, name);
  $("current-collection").textContent = name;
  $("upload-target").textContent = name;
  for (const button of document.querySelectorAll("#collections button")) {
    button.setAttribute("aria-pressed", String(button.dataset.name === name));
  }
}

async function loadCollections() {
  try {
    const { collections } = await api("/api/v1/collections");
    $("collections").replaceChildren(...collections.map((c) => {
      const button = el("button", { type: "button", "data-name": c.name, "aria-pressed": "false" },
        el("span", { text: c.name }), el("span", { class: "count", text: `${c.documents} docs` }));
      button.addEventListener("click", () => selectCollection(c.name));
      return el("li", {}, button);
    }));
    $("collections-empty").hidden = collections.length > 0;
    if (collections.length && !collections.some((c) => c.name === state.collection)) {
      state.collection = collections[0].name;
    }
    selectCollection(state.collection);
    clearError();
  } catch (error) {
    showError(error);
  }
}

async function upload(event) {
  event.preventDefault();
  const file = $("upload-file").files[0];
  if (!file) return;
  const form = new FormData();
  form.append("file", file);
  form.append("collection", state.collection);
  $("upload-status").textContent = `Uploading ${file.name}…`;
  try {
    const result = await api("/api/v1/ingest/file", { method: "POST", body: form });
    $("upload-status").textContent = `${result.status}: ${result.title || result.doc_id} (${result.chunks} chunks)`;
    $("upload-form").reset();
    await loadCollections();
  } catch (error) {
    $("upload-status").textContent = "";
    showError(error);
  }
}

// --- the conversation ---------------------------------------------------------------------------------------
function addTurn(question, label) {
  const id = `turn-${++state.turns}`;
  const answer = el("div", { class: "answer", "data-testid": "answer" });
  const sources = el("ol", { class: "sources", "data-testid": "sources" });
  const generator = el("div", { class: "generator" }, label ? el("span", { text: label }) : null);
  const turn = el("section", { class: "turn", id },
    el("div", { class: "question", text: question }), el("div", { class: "reply" }, answer, generator, sources));
  $("conversation").append(turn);
  turn.scrollIntoView({ block: "end" });
  return { id, turn, answer, sources, generator };
}

// The answer's text as the page shows it: code spans as code, Markdown links (http/https only) and emphasis
// rendered, each [n] a link to source n of the same turn. Everything else is text nodes (never HTML).
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)|\*\*([^*\n]+)\*\*|(?<![\w*])\*([^*\s][^*\n]*)\*(?![\w*])/g;

function renderAnswer(node, text, turnId) {
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    parts.push(...citations(text.slice(last, match.index), turnId));
    if (match[1]) {
      const code = match[2];
      parts.push(el("code", { text: code.startsWith(" ") && code.endsWith(" ") && code.trim() ? code.slice(1, -1) : code }));
    } else if (match[3]) {
      parts.push(el("a", { href: match[4], target: "_blank", rel: "noopener noreferrer", text: match[3] }));
    } else if (match[5]) {
      parts.push(el("strong", {}, ...citations(match[5], turnId)));
    } else {
      parts.push(el("em", {}, ...citations(match[6], turnId)));
    }
    last = match.index + match[0].length;
  }
  parts.push(...citations(text.slice(last), turnId));
  node.replaceChildren(...parts);
}

// Text with each [n] a link to source n of the turn.
function citations(text, turnId) {
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(CITATION)) {
    parts.push(document.createTextNode(text.slice(last, match.index)));
    const numbers = match[1].split(/\s*[,;]\s*/);
    for (const n of numbers) {
      const link = el("a", { class: "cite", href: `#${turnId}-source-${n}`, text: `[${n}]` });
      link.addEventListener("click", (event) => {
        event.preventDefault();
        const target = document.getElementById(`${turnId}-source-${n}`);
        if (target) {
          target.scrollIntoView({ block: "nearest" });
          target.classList.remove("flash");
          void target.offsetWidth;
          target.classList.add("flash");
        }
      });
      parts.push(link);
    }
    last = match.index + match[0].length;
  }
  parts.push(document.createTextNode(text.slice(last)));
  return parts;
}

function documentLink(collection, docId) {
  const href = `/api/v1/documents/${encodeURIComponent(docId)}?collection=${encodeURIComponent(collection)}`;
  const link = el("a", { class: "open", href, text: "whole document" });
  link.addEventListener("click", (event) => {
    event.preventDefault();
    openDocument(collection, docId);
  });
  return link;
}

function renderSources(list, sources, turnId) {
  list.replaceChildren(...sources.map((s) => el("li", {
    id: `${turnId}-source-${s.number}`, class: s.cited ? "cited" : "", "data-doc-id": s.doc_id,
  },
  el("div", { class: "source-head" },
    el("span", { class: "num", text: `[${s.number}]` }),
    el("span", { class: "title", text: s.title || s.filename || s.doc_id }),
    s.location ? el("span", { class: "lines", "data-testid": "lines", text: s.location }) : null,
    el("span", { class: "score", text: s.cited ? "cited" : `relevance ${Number(s.relevance_score || 0).toFixed(2)}` })),
  s.snippet ? el("div", { class: "snippet", text: s.snippet }) : null,
  documentLink(s.collection, s.doc_id))));
}

async function openDocument(collection, docId) {
  try {
    const doc = await api(`/api/v1/documents/${encodeURIComponent(docId)}?collection=${encodeURIComponent(collection)}`);
    $("doc-title").textContent = doc.title || doc.doc_id;
    $("doc-meta").textContent = `${doc.collection} / ${doc.doc_id} · ${doc.chunks.length} chunks`;
    $("doc-text").textContent = doc.text;
    $("doc-dialog").showModal();
  } catch (error) {
    showError(error);
  }
}

function setSession(id) {
  state.sessionId = id || "";
  if (id) localStorage.setItem(SESSION_STORAGE, id);
  else localStorage.removeItem(SESSION_STORAGE);
}

async function ask(query) {
  const view = addTurn(query);
  view.answer.classList.add("streaming");
  const body = { query, collection: state.collection, stream: true };
  if (state.sessionId) body.session_id = state.sessionId;
  try {
    const response = await fetch("/api/v1/ask", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
    });
    if (!response.ok) throw await apiError(response);
    let text = "";
    for await (const { event, data } of sseEvents(response)) {
      const payload = JSON.parse(data);
      if (event === "token") {
        text += payload.text;
        view.answer.textContent = text;
      } else if (event === "done") {
        renderAnswer(view.answer, payload.answer, view.id);
        renderSources(view.sources, payload.sources, view.id);
        view.generator.textContent = payload.generator === "model"
          ? `answered by ${payload.model}` : "extractive answer (no chat model configured)";
        setSession(payload.session_id);
      } else if (event === "error") {
        throw new ApiError(0, payload.error);
      }
    }
  } catch (error) {
    view.turn.classList.add("failed");
    if (!view.answer.textContent) view.answer.textContent = "—";
    showError(error);
  } finally {
    view.answer.classList.remove("streaming");
    view.turn.scrollIntoView({ block: "end" });
  }
}

async function search(query) {
  const view = addTurn(query, "search results");
  try {
    const result = await api("/api/v1/search", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ query, collection: state.collection, top_k: 8, group_by_document: true }),
    });
    view.answer.textContent = result.results.length ? "" : "Nothing found.";
    view.answer.hidden = result.results.length > 0; // the results are the reply: no empty answer block above them
    renderSources(view.sources, result.results.map((hit, i) => ({
      number: i + 1, doc_id: hit.doc_id, collection: hit.collection, title: hit.title,
      snippet: hit.text.length > 300 ? `${hit.text.slice(0, 299)}…` : hit.text, relevance_score: hit.score,
      cited: false, location: hit.location ? `${hit.location.path}:${hit.location.start_line}-${hit.location.end_line}` : "",
    })), view.id);
  } catch (error) {
    view.answer.textContent = "—";
    showError(error);
  }
}

async function restoreSession() {
  if (!state.sessionId) return;
  try {
    const session = await api(`/api/v1/sessions/${encodeURIComponent(state.sessionId)}`);
    for (const turn of session.turns) {
      const view = addTurn(turn.query);
      renderAnswer(view.answer, turn.answer, view.id);
      renderSources(view.sources, turn.sources, view.id);
    }
  } catch (error) {
    if (error.status === 404) setSession("");
    else showError(error);
  }
}

async function newConversation() {
  if (state.sessionId) {
    try {
      await api(`/api/v1/sessions/${encodeURIComponent(state.sessionId)}`, { method: "DELETE" });
    } catch (_) {
      // forgetting is best effort
    }
  }
  setSession("");
  $("conversation").replaceChildren();
  clearError();
  $("question").focus();
}

async function submit(event) {
  event.preventDefault();
  const query = $("question").value.trim();
  if (!query || state.busy) return;
  state.busy = true;
  $("send").disabled = true;
  clearError();
  $("question").value = "";
  try {
    const mode = document.querySelector("input[name=mode]:checked").value;
    await (mode === "search" ? search(query) : ask(query));
  } finally {
    state.busy = false;
    $("send").disabled = false;
    $("question").focus();
  }
}

// --- wiring -------------------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", submit);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) submit(event);
  });
  for (const radio of document.querySelectorAll("input[name=mode]")) {
    radio.addEventListener("change", () => {
      $("send").textContent = radio.value === "search" ? "Search" : "Ask";
    });
  }
  $("upload-form").addEventListener("submit", upload);
  $("refresh").addEventListener("click", loadCollections);
  $("new-conversation").addEventListener("click", newConversation);
  $("key-button").addEventListener("click", openKeyDialog);
  $("key-form").addEventListener("submit", () => {
    const key = $("key-input").value.trim();
    if (key) localStorage.setItem(KEY_STORAGE, key);
    showKeyState();
    loadCollections().then(restoreSession);
  });
  $("key-clear").addEventListener("click", () => {
    localStorage.removeItem(KEY_STORAGE);
    showKeyState();
    $("key-dialog").close();
  });
  showKeyState();
  selectCollection(state.collection);
  loadCollections().then(restoreSession);
});
