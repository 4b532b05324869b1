// The corefsearch page: plain JavaScript, no build step and nothing fetched from elsewhere.
// Every text from the server or the user goes into the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  apiKey: sessionStorage.getItem("corefsearch-api-key") || "",
  selection: null, // {start, end}: the mention's characters in the context, from a selection
  info: null,
  hits: [],
  search: null, // the search on the page: {question, options, offset} (see ask)
  shownAddress: null, // its address (the fragment), as addressOf writes it
  openingAddress: null, // the address whose search is being opened
  queries: { offset: 0 }, // the dataset queries listed
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

// A search is a question ({qid}, {context, start, end} or {mention[, context]}), its options ({k,
// retriever, query_format[, rerank_k]}) and the offset of its page: k hits from rank offset + 1.
// The search on the page is also in the page's address (the fragment), so that a copied address
// reopens it, and the browser's back and forward buttons go through the searches made.

function searchOptions() {
  const options = {
    k: Number($("k").value) || 10,
    retriever: $("retriever").value || undefined,
    query_format: $("query-format").value || undefined,
  };
  if (!$("rerank-box").hidden && $("rerank-k").value !== "") options.rerank_k = Number($("rerank-k").value);
  if (!$("cluster-box").hidden && $("as-cluster").checked) options.cluster = true;
  return options;
}

function maxK() {
  return state.info ? state.info.limits.max_k : Infinity;
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

// Ask `question` with `options` from rank `offset` + 1; `history`: "push" (a new entry of the
// browser's history), "replace" (the current one) or "none".
async function ask(question, options, offset, history = "push") {
  // The last page stops at the server's max_k: the deepest rank it answers.
  const k = Math.max(1, Math.min(options.k, maxK() - offset));
  const result = await runSearch({ ...question, ...options, k, offset });
  if (!result) return null;
  state.search = { question, options, offset };
  if (question.qid !== undefined) showDatasetQuery(result.query);
  writeAddress(history);
  renderPager(result);
  return result;
}

function search() {
  const context = $("context").value;
  let question;
  if (state.selection) {
    question = { context, start: state.selection.start, end: state.selection.end };
  } else {
    const mention = $("mention").value;
    if (!mention) {
      showError(new Error("Select the mention in the passage, or type it."));
      return;
    }
    question = { mention };
    if (context) question.context = context;
  }
  ask(question, searchOptions(), 0);
}

function openQuery(qid) {
  if (qid) ask({ qid }, searchOptions(), 0);
}

// The question of a dataset query fills the page: its passage, its mention selected, its split.
function showDatasetQuery(query) {
  $("qid").value = query.id;
  $("context").value = query.context;
  setSelection(query.start, query.end);
  const split = $("dataset-split");
  if (query.split && split.value !== query.split && [...split.options].some((o) => o.value === query.split)) {
    split.value = query.split;
    state.queries.offset = 0;
    loadQueries();
  }
  const picker = $("dataset-query");
  if ([...picker.options].some((o) => o.value === query.id)) picker.value = query.id;
}

function page(step) {
  if (!state.search) return;
  const { question, options, offset } = state.search;
  ask(question, options, Math.max(0, offset + step * options.k));
}

function renderPager(result) {
  const { options, offset } = state.search;
  const count = result.hits.length;
  const limit = maxK();
  $("pager").hidden = false;
  $("previous-page").disabled = offset === 0;
  // No next page when this one came short (the ranking ended) or reached the server's max_k.
  $("next-page").disabled = count < Math.min(options.k, limit - offset) || offset + count >= limit;
  const shown = count ? `ranks ${offset + 1}–${offset + count}` : `no hits after rank ${offset}`;
  $("page-info").textContent = `${shown} · this server ranks at most ${limit.toLocaleString("en-US")} passages`;
}

// --- the address: the search on the page, in the fragment ------------------------------------

const QUESTION_FIELDS = ["qid", "context", "mention", "start", "end"];
const WHOLE_NUMBERS = ["start", "end", "k", "offset", "rerank_k"];

function addressOf(search) {
  const params = new URLSearchParams();
  for (const name of QUESTION_FIELDS) {
    if (search.question[name] !== undefined) params.set(name, search.question[name]);
  }
  for (const [name, value] of Object.entries(search.options)) {
    if (value !== undefined) params.set(name, value);
  }
  if (search.offset) params.set("offset", search.offset);
  return "#" + params.toString();
}

function normalAddress(hash) {
  const text = new URLSearchParams(hash.replace(/^#/, "")).toString();
  return text ? "#" + text : "";
}

function writeAddress(history) {
  const hash = addressOf(state.search);
  state.shownAddress = hash;
  if (history === "none" || normalAddress(location.hash) === hash) return;
  if (history === "push") window.history.pushState(null, "", hash);
  else window.history.replaceState(null, "", hash);
}

// The search an address names, or null when it names no question.
function searchOfAddress(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const value = {};
  for (const [name, text] of params) {
    if (WHOLE_NUMBERS.includes(name)) {
      if (!/^\d+$/.test(text)) throw new Error(`The page's address has ${name}=${text}: not a whole number.`);
      value[name] = Number(text);
    } else {
      value[name] = text;
    }
  }
  let question;
  if (value.qid !== undefined) question = { qid: value.qid };
  else if (value.start !== undefined || value.end !== undefined) {
    question = { context: value.context ?? "", start: value.start, end: value.end };
  } else if (value.mention !== undefined) {
    question = { mention: value.mention };
    if (value.context !== undefined) question.context = value.context;
  } else return null;
  const options = { k: value.k ?? state.info.defaults.k };
  for (const name of ["retriever", "query_format", "rerank_k"]) {
    if (value[name] !== undefined) options[name] = value[name];
  }
  if (value.cluster === "true") options.cluster = true;
  return { question, options, offset: value.offset ?? 0 };
}

// Open the search of the page's address (on load, and when the address changes: back, forward,
// or an address pasted in this tab), unless it is the one shown.
async function openAddress() {
  const wanted = normalAddress(location.hash);
  // popstate and hashchange both come for one step back: the second finds the search on its way.
  if (!state.info || wanted === state.shownAddress || wanted === state.openingAddress) return;
  let found;
  try {
    found = searchOfAddress(location.hash);
  } catch (error) {
    showError(error);
    return;
  }
  if (!found) return;
  state.openingAddress = wanted;
  try {
    await openSearch(found);
  } finally {
    state.openingAddress = null;
  }
}

async function openSearch(found) {
  const { question, options, offset } = found;
  $("k").value = options.k;
  if (options.retriever !== undefined) $("retriever").value = options.retriever;
  if (options.query_format !== undefined) $("query-format").value = options.query_format;
  if (options.rerank_k !== undefined && !$("rerank-box").hidden) $("rerank-k").value = options.rerank_k;
  $("as-cluster").checked = Boolean(options.cluster) && !$("cluster-box").hidden;
  if (question.qid === undefined) {
    $("context").value = question.context ?? "";
    if (question.start !== undefined && question.end !== undefined) setSelection(question.start, question.end);
    else {
      state.selection = null;
      $("mention").value = question.mention ?? "";
      updatePreview();
    }
  }
  await ask(question, options, offset, "replace");
}

function renderResult(result) {
  state.hits = result.hits;
  const list = $("hits");
  list.textContent = "";
  const timing = result.timing || {};
  const count = result.hits.length;
  let summary = `${count} hits`;
  if (count) summary += ` (ranks ${result.hits[0].rank}–${result.hits[count - 1].rank})`;
  summary += ` · ${result.retriever}`;
  if (result.reader) summary += ` + reader (${result.rerank_fusion})`;
  if (timing.total_ms !== undefined) summary += ` · ${timing.total_ms.toFixed(0)} ms`;
  if (result.query.relevant_passages !== undefined && result.query.relevant_passages !== null) {
    const found = result.hits.filter((h) => h.relevant).length;
    summary += ` · ${found} relevant here, of the ${result.query.relevant_passages} relevant passages ` +
      `(query ${result.query.id})`;
  }
  $("summary").textContent = summary;
  const bm25 = $("bm25-query");
  bm25.hidden = !result.query.bm25_query;
  bm25.textContent = result.query.bm25_query ? `BM25 query: ${result.query.bm25_query}` : "";
  for (const hit of result.hits) list.appendChild(renderHit(hit));
  renderExpansion(result.expansion);
  renderCluster(result.cluster);
}

// Where the mentions of the second round and of the cluster came from (the answer's `candidates`,
// `detector`, `detected`, `reader`), in plain words.
function candidatesSource(record) {
  const detected = () => {
    const by = `mentions detected by ${record.detector || "a detector"}`;
    if (!record.detected) return by;
    if (record.detected.startsWith("stored")) return `${by}, stored by corefsearch detect`;
    return `${by} ${record.detected}`; // "at query time"
  };
  let words;
  if (record.candidates === "reader") words = "reader spans";
  else if (record.candidates === "gold") words = "annotated (gold) mentions — an upper bound";
  else if (record.candidates === "detected") words = detected();
  else return "";
  // The candidates of every hit, and the reader's span where it read one that overlaps none of them.
  if (record.reader && record.candidates !== "reader") words = `${words}, and reader spans that overlap none`;
  return words;
}

function showNote(element, note) {
  element.hidden = !note;
  element.textContent = note ? `Note: ${note}${/[.!?]$/.test(note) ? "" : "."}` : "";
}

// The second round (`rounds: 2`, the server's --rounds): the mentions it searched again from.
function renderExpansion(expansion) {
  const box = $("expansion");
  box.hidden = !expansion;
  if (!expansion) return;
  const queries = expansion.queries || [];
  let text = queries.length
    ? `Second round from ${queries.length} coreferring mention${queries.length === 1 ? "" : "s"} of the top ` +
      `${expansion.expand} passages: ` + queries.map((q) => `“${q.mention}” (${q.passage_id})`).join(", ")
    : `Second round: no coreferring mention in the top ${expansion.expand} passages`;
  const source = candidatesSource(expansion);
  if (source) text += ` · ${source}`;
  const without = expansion.passages_without_candidates;
  if (without) text += ` · ${without} of them without a candidate`;
  $("expansion-summary").textContent = text;
  showNote($("expansion-note"), expansion.note);
}

// The answer as a cluster (`cluster: true`): the documents holding the query mention's cluster, each
// mention highlighted in its passage, then the near misses.
function renderCluster(cluster) {
  const section = $("cluster");
  section.hidden = !cluster;
  if (!cluster) return;
  const others = cluster.size - 1;
  $("cluster-summary").textContent = `The query mention and ${others} other mention${others === 1 ? "" : "s"} ` +
    `in ${cluster.documents.length} document${cluster.documents.length === 1 ? "" : "s"} ` +
    `(each hit's best candidate mention with a score of at least ${cluster.threshold})`;
  const source = candidatesSource(cluster);
  let from = source ? `From ${source}` : "";
  const without = cluster.passages_without_mentions;
  if (without) from += `${from ? " · " : ""}no mention found in ${without} of the hits`;
  $("cluster-source").textContent = from;
  showNote($("cluster-note"), cluster.note);
  const list = $("cluster-documents");
  list.textContent = "";
  for (const document_ of cluster.documents) {
    const item = document.createElement("li");
    item.className = "cluster-document";
    const head = document.createElement("div");
    head.className = "cluster-title";
    head.textContent = `${document_.doc_id || "document unknown"} · ${document_.title}`;
    item.appendChild(head);
    for (const mention of document_.mentions) item.appendChild(renderClusterMention(mention));
    list.appendChild(item);
  }
  const misses = $("cluster-misses");
  misses.textContent = "";
  for (const mention of cluster.near_misses) {
    const item = document.createElement("li");
    item.appendChild(renderClusterMention(mention));
    misses.appendChild(item);
  }
  $("cluster-misses-title").hidden = cluster.near_misses.length === 0;
}

function renderClusterMention(mention) {
  const block = document.createElement("p");
  block.className = "cluster-mention";
  block.dataset.passageId = mention.passage_id;
  const where = document.createElement("span");
  where.className = "muted";
  where.textContent = `#${mention.rank} ${mention.passage_id} · score ${mention.score.toFixed(3)} · `;
  const text = document.createElement("span");
  renderMarked(text, mention.text, [{ start: mention.start, end: mention.end, cls: "cluster-mark" }]);
  block.append(where, text);
  return block;
}

// How the corpus judged a hit of a dataset query (the server's `judgement`, see serve/judgements.py):
// [badge text, class, what it means].
const JUDGEMENTS = {
  relevant: ["relevant", "relevant", "The query's qrels hold this passage relevant."],
  not_relevant: ["not relevant", "not-relevant",
    "Judged: the corpus annotated this passage's document and marked no mention of the query's cluster here."],
  unjudged: ["unjudged", "unjudged",
    "Never judged: the corpus did not annotate this passage's document; it may mention the query's event or not."],
};

function renderHit(hit) {
  const item = document.createElement("li");
  item.className = "hit";
  item.dataset.passageId = hit.passage_id;
  const judgement = JUDGEMENTS[hit.judgement];
  if (judgement) item.classList.add(judgement[1]);

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
  if (judgement) {
    const badge = document.createElement("span");
    badge.className = `badge ${judgement[1]}`;
    badge.textContent = judgement[0];
    badge.title = judgement[2];
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

const QUERY_PAGE = 200; // queries listed at a time; the rest by ‹ ›, or found by a part of their id or mention
let queriesAsked = 0; // answers to an older request of the list (the filter typed on) are dropped

async function loadQueries() {
  const split = $("dataset-split").value;
  const contains = $("query-filter").value.trim();
  const offset = state.queries.offset;
  const params = new URLSearchParams({ split, offset, limit: QUERY_PAGE });
  if (contains) params.set("contains", contains);
  const asked = ++queriesAsked;
  let answer;
  try {
    answer = await api(`queries?${params}`);
  } catch (error) {
    showError(error);
    return;
  }
  if (asked !== queriesAsked) return;
  const select = $("dataset-query");
  select.textContent = "";
  const blank = document.createElement("option");
  blank.value = "";
  blank.textContent = answer.queries.length ? "— pick a query —" : "— none —";
  select.appendChild(blank);
  for (const query of answer.queries) {
    const option = document.createElement("option");
    option.value = query.id;
    option.textContent = `${query.id}: ${query.mention}`;
    select.appendChild(option);
  }
  const number = (n) => n.toLocaleString("en-US");
  const first = answer.offset + 1;
  const last = answer.offset + answer.queries.length;
  let count;
  if (contains) {
    count = answer.matching
      ? `${number(first)}–${number(last)} of the ${number(answer.matching)} queries matching “${contains}”`
      : `no query matches “${contains}”`;
    count += ` (${number(answer.total)} in ${answer.split})`;
  } else {
    count = answer.total ? `${number(first)}–${number(last)} of ${number(answer.total)} queries` : "no queries";
  }
  $("query-count").textContent = count;
  $("queries-previous").disabled = answer.offset === 0;
  $("queries-next").disabled = last >= answer.matching;
}

function pageQueries(step) {
  state.queries.offset = Math.max(0, state.queries.offset + step * QUERY_PAGE);
  loadQueries();
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
  $("legend-span").hidden = !info.reader;
  $("legend-gold").hidden = !info.dataset;
  fillSelect($("retriever"), info.retrievers, defaults.retriever);
  fillSelect($("query-format"), info.query_formats, defaults.query_format);
  $("k").max = info.limits.max_k;
  $("k").value = defaults.k;
  if (info.reader) {
    $("rerank-box").hidden = false;
    $("rerank-k").max = info.limits.max_rerank_k;
    $("rerank-k").value = defaults.rerank_k;
  }
  $("cluster-box").hidden = !info.mention_encoder;
  if (info.dataset) {
    $("dataset-row").hidden = false;
    fillSelect($("dataset-split"), info.dataset_splits, info.dataset_splits.includes("test") ? "test" : undefined);
    state.queries.offset = 0;
    await loadQueries();
  }
  await openAddress();
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
  $("dataset-split").addEventListener("change", () => {
    state.queries.offset = 0;
    loadQueries();
  });
  let typing = null;
  $("query-filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      state.queries.offset = 0;
      loadQueries();
    }, 250);
  });
  $("queries-previous").addEventListener("click", () => pageQueries(-1));
  $("queries-next").addEventListener("click", () => pageQueries(1));
  $("dataset-query").addEventListener("change", () => {
    const qid = $("dataset-query").value;
    $("qid").value = qid;
    openQuery(qid);
  });
  $("previous-page").addEventListener("click", () => page(-1));
  $("next-page").addEventListener("click", () => page(1));
  window.addEventListener("popstate", openAddress);
  window.addEventListener("hashchange", openAddress);
  $("api-key").value = state.apiKey;
  $("api-key-save").addEventListener("click", () => {
    state.apiKey = $("api-key").value;
    sessionStorage.setItem("corefsearch-api-key", state.apiKey);
    start();
  });
}

bind();
start();
