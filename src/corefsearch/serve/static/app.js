// The corefsearch page: plain JavaScript, no build step and nothing fetched from elsewhere.
// Every text from the server or the user goes into the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  apiKey: sessionStorage.getItem("corefsearch-api-key") || "",
  selection: null, // {start, end}: the mention's characters in the context, from a selection
  info: null,
  hits: [],
};

// --- the API ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, body) {
  const headers = {};
  if (state.apiKey) headers["X-API-Key"] = state.apiKey;
  const init = { headers };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (!response.ok) {
    const message = payload && payload.detail ? payload.detail : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, typeof message === "string" ? message : JSON.stringify(message));
  }
  return payload;
}

function showError(error) {
  const box = $("error");
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.hidden = false;
  box.textContent = error.message || String(error);
  if (error.status === 401) $("api-key-row").hidden = false;
}

// --- marking text --------------------------------------------------------------------------

// Fill `container` with `text`, each character range of `marks` ({start, end, cls}) wrapped in a
// <span> carrying the classes of every mark that covers it (marks may overlap).
function renderMarked(container, text, marks) {
  container.textContent = "";
  const cuts = new Set([0, text.length]);
  for (const mark of marks) {
    cuts.add(Math.max(0, Math.min(text.length, mark.start)));
    cuts.add(Math.max(0, Math.min(text.length, mark.end)));
  }
  const points = [...cuts].sort((a, b) => a - b);
  for (let i = 0; i + 1 < points.length; i++) {
    const [from, to] = [points[i], points[i + 1]];
    const classes = marks.filter((m) => m.start <= from && to <= m.end).map((m) => m.cls);
    const piece = text.slice(from, to);
    if (classes.length === 0) {
      container.appendChild(document.createTextNode(piece));
    } else {
      const span = document.createElement("span");
      span.className = [...new Set(classes)].join(" ");
      span.textContent = piece;
      container.appendChild(span);
    }
  }
}

function hitMarks(hit) {
  const marks = (hit.matched || []).map(([start, end]) => ({ start, end, cls: "term" }));
  if (hit.span) marks.push({ start: hit.span.start, end: hit.span.end, cls: "span" });
  for (const gold of hit.gold_mentions || []) marks.push({ start: gold.start, end: gold.end, cls: "gold" });
  return marks;
}

// --- the question: context and mention -------------------------------------------------------

function currentMention() {
  const context = $("context").value;
  if (state.selection) {
    const { start, end } = state.selection;
    return { text: context.slice(start, end), start, end };
  }
  const typed = $("mention").value;
  if (!typed) return null;
  const start = context ? context.indexOf(typed) : -1;
  return { text: typed, start, end: start < 0 ? -1 : start + typed.length };
}

function updatePreview() {
  const preview = $("context-preview");
  const context = $("context").value;
  const mention = currentMention();
  const where = $("mention-where");
  if (!mention) {
    where.textContent = "";
    preview.textContent = "";
    return;
  }
  if (mention.start >= 0 && context) {
    where.textContent = `characters ${mention.start}–${mention.end}` + (state.selection ? " (selected)" : "");
    renderMarked(preview, context, [{ start: mention.start, end: mention.end, cls: "mention" }]);
  } else {
    where.textContent = context ? "not found in the passage" : "(the mention alone is the question)";
    preview.textContent = "";
  }
}

function takeSelection() {
  const area = $("context");
  const { selectionStart: start, selectionEnd: end } = area;
  if (start === end) return;
  let [from, to] = [start, end];
  const text = area.value;
  // A double-click may take the space after a word with it: keep the mention itself.
  while (to > from && /\s/.test(text[to - 1])) to--;
  while (from < to && /\s/.test(text[from])) from++;
  if (from === to) return;
  state.selection = { start: from, end: to };
  $("mention").value = text.slice(from, to);
  updatePreview();
}

function setSelection(start, end) {
  const area = $("context");
  state.selection = { start, end };
  $("mention").value = area.value.slice(start, end);
  area.focus();
  area.setSelectionRange(start, end);
  updatePreview();
}

// --- searching -------------------------------------------------------------------------------

function searchOptions() {
  const options = {
    k: Number($("k").value) || 10,
    retriever: $("retriever").value || undefined,
    query_format: $("query-format").value || undefined,
  };
  if (!$("rerank-box").hidden && $("rerank-k").value !== "") options.rerank_k = Number($("rerank-k").value);
  return options;
}

async function runSearch(body) {
  showError(null);
  const button = $("search");
  button.disabled = true;
  $("summary").textContent = "Searching…";
  try {
    const result = await api("search", body);
    renderResult(result);
    return result;
  } catch (error) {
    $("summary").textContent = "The search failed.";
    showError(error);
    return null;
  } finally {
    button.disabled = false;
  }
}

function search() {
  const context = $("context").value;
  const body = searchOptions();
  if (state.selection) {
    Object.assign(body, { context, start: state.selection.start, end: state.selection.end });
  } else {
    const mention = $("mention").value;
    if (!mention) {
      showError(new Error("Select the mention in the passage, or type it."));
      return;
    }
    body.mention = mention;
    if (context) body.context = context;
  }
  runSearch(body);
}

async function openQuery(qid) {
  if (!qid) return;
  const result = await runSearch({ qid, ...searchOptions() });
  if (!result) return;
  $("context").value = result.query.context;
  setSelection(result.query.start, result.query.end);
}

function renderResult(result) {
  state.hits = result.hits;
  const list = $("hits");
  list.textContent = "";
  const timing = result.timing || {};
  let summary = `${result.hits.length} hits · ${result.retriever}`;
  if (result.reader) summary += ` + reader (${result.rerank_fusion})`;
  if (timing.total_ms !== undefined) summary += ` · ${timing.total_ms.toFixed(0)} ms`;
  if (result.query.relevant_passages !== undefined && result.query.relevant_passages !== null) {
    const found = result.hits.filter((h) => h.relevant).length;
    summary += ` · ${found} of ${result.query.relevant_passages} relevant passages (query ${result.query.id})`;
  }
  $("summary").textContent = summary;
  const bm25 = $("bm25-query");
  bm25.hidden = !result.query.bm25_query;
  bm25.textContent = result.query.bm25_query ? `BM25 query: ${result.query.bm25_query}` : "";
  for (const hit of result.hits) list.appendChild(renderHit(hit));
}

function renderHit(hit) {
  const item = document.createElement("li");
  item.className = "hit";
  item.dataset.passageId = hit.passage_id;
  if (hit.relevant === true) item.classList.add("relevant");
  if (hit.relevant === false) item.classList.add("not-relevant");

  const head = document.createElement("div");
  head.className = "hit-head";
  const rank = document.createElement("span");
  rank.className = "rank";
  rank.textContent = `${hit.rank}.`;
  const title = document.createElement("span");
  title.className = "title";
  title.textContent = hit.title || "(untitled)";
  const meta = document.createElement("span");
  meta.className = "muted";
  meta.textContent = `${hit.passage_id} · score ${Number(hit.score).toFixed(3)}`;
  head.append(rank, title, meta);
  if (hit.relevant !== undefined) {
    const badge = document.createElement("span");
    badge.className = "badge " + (hit.relevant ? "yes" : "no");
    badge.textContent = hit.relevant ? "relevant" : "not relevant";
    head.appendChild(badge);
  }

  const text = document.createElement("p");
  text.className = "hit-text";
  renderMarked(text, hit.text, hitMarks(hit));

  const actions = document.createElement("div");
  actions.className = "hit-actions";
  const open = document.createElement("button");
  open.type = "button";
  open.className = "open-document";
  open.textContent = "Open in its document";
  open.addEventListener("click", () => openDocument(hit));
  const ask = document.createElement("button");
  ask.type = "button";
  ask.textContent = hit.span ? "Ask about its span" : "Use as the passage";
  ask.addEventListener("click", () => {
    $("context").value = hit.text;
    if (hit.span) setSelection(hit.span.start, hit.span.end);
    else {
      state.selection = null;
      $("mention").value = "";
      updatePreview();
    }
    window.scrollTo({ top: 0 });
  });
  actions.append(open, ask);
  if (hit.span) {
    const span = document.createElement("span");
    span.className = "muted";
    span.textContent = `reader: “${hit.span.text}”`;
    actions.appendChild(span);
  }
  item.append(head, text, actions);
  return item;
}

// --- a passage in its document ---------------------------------------------------------------

async function openDocument(hit) {
  showError(null);
  let passage;
  try {
    passage = await api(`passages/${encodeURIComponent(hit.passage_id)}`);
  } catch (error) {
    showError(error);
    return;
  }
  const section = $("document");
  section.hidden = false;
  $("document-title").textContent = passage.title || "Document";
  const count = passage.document.length;
  $("document-info").textContent = `${passage.doc_id} · ${count} passage${count === 1 ? "" : "s"}`;
  const container = $("document-passages");
  container.textContent = "";
  let current = null;
  for (const part of passage.document) {
    const block = document.createElement("p");
    block.className = "doc-passage";
    block.dataset.passageId = part.id;
    if (part.id === passage.id) {
      block.classList.add("current");
      renderMarked(block, part.text, part.text === hit.text ? hitMarks(hit) : []);
      current = block;
    } else {
      block.textContent = part.text;
    }
    container.appendChild(block);
  }
  section.scrollIntoView({ block: "start" });
  if (current) current.scrollIntoView({ block: "center" });
}

async function loadPassage() {
  const id = $("load-passage-id").value.trim();
  if (!id) return;
  showError(null);
  try {
    const passage = await api(`passages/${encodeURIComponent(id)}`);
    $("context").value = passage.text;
    state.selection = null;
    $("mention").value = "";
    updatePreview();
  } catch (error) {
    showError(error);
  }
}

// --- dataset queries -------------------------------------------------------------------------

async function loadQueries() {
  const split = $("dataset-split").value;
  const select = $("dataset-query");
  select.textContent = "";
  try {
    const answer = await api(`queries?split=${encodeURIComponent(split)}&limit=500`);
    const blank = document.createElement("option");
    blank.value = "";
    blank.textContent = `— ${answer.total} queries —`;
    select.appendChild(blank);
    for (const query of answer.queries) {
      const option = document.createElement("option");
      option.value = query.id;
      option.textContent = `${query.id}: ${query.mention}`;
      select.appendChild(option);
    }
  } catch (error) {
    showError(error);
  }
}

// --- start-up ----------------------------------------------------------------------------------

function fillSelect(select, values, chosen) {
  select.textContent = "";
  for (const value of values) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = value;
    option.selected = value === chosen;
    select.appendChild(option);
  }
}

async function start() {
  let info;
  try {
    info = await api("info");
  } catch (error) {
    $("server-info").textContent = error.status === 401 ? "This server needs an API key." : "The server did not answer.";
    showError(error);
    return;
  }
  state.info = info;
  showError(null);
  $("api-key-row").hidden = !info.limits.api_key;
  const defaults = info.defaults;
  const reader = info.reader ? ` · reader ${info.reader.model || info.reader}` : "";
  $("server-info").textContent = `index ${info.index} · retrievers ${info.retrievers.join(", ")}${reader}`;
  fillSelect($("retriever"), info.retrievers, defaults.retriever);
  fillSelect($("query-format"), info.query_formats, defaults.query_format);
  $("k").max = info.limits.max_k;
  $("k").value = defaults.k;
  if (info.reader) {
    $("rerank-box").hidden = false;
    $("rerank-k").max = info.limits.max_rerank_k;
    $("rerank-k").value = defaults.rerank_k;
  }
  if (info.dataset) {
    $("dataset-row").hidden = false;
    fillSelect($("dataset-split"), info.dataset_splits, info.dataset_splits.includes("test") ? "test" : undefined);
    await loadQueries();
  }
}

function bind() {
  const area = $("context");
  for (const event of ["select", "mouseup", "keyup"]) area.addEventListener(event, takeSelection);
  area.addEventListener("input", () => {
    state.selection = null;
    updatePreview();
  });
  area.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) search();
  });
  $("mention").addEventListener("input", () => {
    state.selection = null;
    updatePreview();
  });
  $("mention").addEventListener("keydown", (event) => {
    if (event.key === "Enter") search();
  });
  $("search").addEventListener("click", search);
  $("load-passage").addEventListener("click", loadPassage);
  $("close-document").addEventListener("click", () => {
    $("document").hidden = true;
  });
  $("open-query").addEventListener("click", () => openQuery($("qid").value.trim()));
  $("qid").addEventListener("keydown", (event) => {
    if (event.key === "Enter") openQuery($("qid").value.trim());
  });
  $("dataset-split").addEventListener("change", loadQueries);
  $("dataset-query").addEventListener("change", () => {
    const qid = $("dataset-query").value;
    $("qid").value = qid;
    openQuery(qid);
  });
  $("api-key").value = state.apiKey;
  $("api-key-save").addEventListener("click", () => {
    state.apiKey = $("api-key").value;
    sessionStorage.setItem("corefsearch-api-key", state.apiKey);
    start();
  });
}

bind();
start();
